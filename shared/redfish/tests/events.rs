//! The Redfish managers' change signals against the simulator's event
//! streams (`shared/redfish/src/events.rs`): a power change and a firmware
//! task's end are signalled; a stream that drops ends the signal and none
//! is handed out while the BMC refuses streams (the caller polls), and one
//! is again once it serves them; a BMC without an EventService gives none;
//! the stream counts against the per-BMC request cap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_hardware::{
    ChangeSignal, ComponentManager, ComponentTarget, FirmwareRequest, FirmwareStart,
    ManagerRegistry, PowerSent, Signalled,
};
use flow_rack_sim::{InitialPower, SimConfig};
use flow_redfish::{CredentialStore, RedfishSettings};
use flow_rules::PowerOperation;

const WAIT: Duration = Duration::from_secs(20);

struct Env {
    sim: flow_rack_sim::Simulator,
    registry: ManagerRegistry,
    http: reqwest::Client,
}

impl Env {
    async fn new() -> Env {
        let sim = flow_rack_sim::start(SimConfig {
            admin_port: 0,
            time_scale: 0.05,
            initial_power: InitialPower::On,
            compute: 1,
            nvswitch: 0,
            powershelf: 1,
            // Updates name images no origin serves: the update API alone.
            fetch_images: false,
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
        let registry =
            flow_redfish::registry(&RedfishSettings::default(), credentials, None).unwrap();
        Env {
            sim,
            registry,
            http: reqwest::Client::new(),
        }
    }

    fn target(&self, name: &str) -> (&Arc<dyn ComponentManager>, ComponentTarget) {
        let rack = self.sim.inventory().into_iter().next().expect("one rack");
        let c = rack
            .components
            .iter()
            .find(|c| c.name == name)
            .expect("component");
        let target = ComponentTarget {
            rack: rack.name.clone(),
            name: c.name.clone(),
            component_type: c.component_type.parse().unwrap(),
            bmc_url: c.bmc_url.clone(),
            credential_ref: c.credential_ref.clone(),
            resource_id: None,
        };
        (self.registry.get(target.component_type).unwrap(), target)
    }

    /// Asks for a signal until one is handed out whose feed does not end:
    /// it announces the stream's opening, or stays quiet for a while (the
    /// stream opened before the ask). What the caller asserts next — an
    /// announcement of a real change — shows the stream is open.
    async fn open_signal(&self, name: &str) -> ChangeSignal {
        let (m, t) = self.target(name);
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(mut signal) = m.change_signal(&t) {
                let quiet = Duration::from_secs(2);
                match tokio::time::timeout(quiet, signal.changed()).await {
                    Ok(Signalled::Changed) | Err(_) => {
                        if let Some(signal) = m.change_signal(&t) {
                            return signal;
                        }
                    }
                    Ok(Signalled::Ended | Signalled::NeverOpened) => {}
                }
            }
            assert!(Instant::now() < deadline, "{name}: no open event stream");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn fault(&self, body: serde_json::Value) {
        let r = self
            .http
            .post(format!("{}/admin/v1/faults", self.sim.admin_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }

    async fn clear_faults(&self) {
        let r = self
            .http
            .delete(format!("{}/admin/v1/faults", self.sim.admin_url()))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_change_and_a_task_end_are_signalled_and_a_dropped_stream_falls_back_to_polling() {
    let env = Env::new().await;
    let (m, t) = env.target("compute-01");
    let mut signal = env.open_signal("compute-01").await;

    // A power change: the signal fires (the stream announced it).
    match m.power_control(&t, PowerOperation::PowerOff).await {
        Ok(PowerSent { .. }) => {}
        other => panic!("power off: {other:?}"),
    }
    let fired = tokio::time::timeout(WAIT, signal.changed()).await;
    assert_eq!(
        fired,
        Ok(Signalled::Changed),
        "no event for the power change"
    );

    // A firmware task's end.
    let mut signal = m.change_signal(&t).expect("the stream is open");
    let request = FirmwareRequest {
        image_uri: "http://images.local/bmc.bin?version=26.01-1".into(),
        version: Some("26.01-1".into()),
        targets: vec![],
        sub_targets: Vec::new(),
    };
    let FirmwareStart::Started(job) = m.firmware_update(&t, &request).await.unwrap() else {
        panic!("expected a started update");
    };
    let fired = tokio::time::timeout(WAIT, signal.changed()).await;
    assert_eq!(fired, Ok(Signalled::Changed), "no event for the task's end");
    let status = m.firmware_status(&t, Some(&job)).await.unwrap();
    assert_eq!(
        status.state,
        flow_hardware::FirmwareState::Completed,
        "{status:?}"
    );

    // The stream counts against the per-BMC cap: it is one request in
    // flight at the BMC, and never more than the cap of 4 were.
    let state = env.sim.state();
    assert!(
        (1..=4).contains(&state.peak_concurrent_requests_per_bmc),
        "{}",
        state.peak_concurrent_requests_per_bmc
    );

    // The BMC stops serving streams: the open one ends, and with it the
    // signal; none is handed out while streams are refused.
    let mut signal = m.change_signal(&t).expect("the stream is open");
    env.fault(serde_json::json!({"target": "rack-01/compute-01", "kind": {"events_down": {}}}))
        .await;
    let ended = tokio::time::timeout(WAIT, signal.changed()).await;
    assert_eq!(
        ended,
        Ok(Signalled::Ended),
        "the dropped stream did not end the signal"
    );
    // A reconnect may be under way (its feed is handed out while it
    // opens): every one it hands out ends, as the BMC refuses the stream.
    let deadline = Instant::now() + WAIT;
    while let Some(mut s) = m.change_signal(&t) {
        let why = tokio::time::timeout(WAIT, s.changed()).await;
        assert_eq!(
            why,
            Ok(Signalled::Ended),
            "a refused stream announced a change"
        );
        assert!(
            Instant::now() < deadline,
            "signals kept coming while refused"
        );
    }
    // Polling still works meanwhile.
    assert_eq!(
        m.power_status(&t).await.unwrap(),
        flow_hardware::PowerStatus::Off
    );

    // Served again: a signal is handed out and fires on the next change.
    env.clear_faults().await;
    let mut signal = env.open_signal("compute-01").await;
    m.power_control(&t, PowerOperation::PowerOn).await.unwrap();
    let fired = tokio::time::timeout(WAIT, signal.changed()).await;
    assert_eq!(
        fired,
        Ok(Signalled::Changed),
        "no event after the stream came back"
    );

    // A BMC without an EventService (a power shelf): its first ask may get
    // the feed of the stream being looked for, which ends unopened; after
    // that none.
    let (shelf, st) = env.target("powershelf-01");
    if let Some(mut s) = shelf.change_signal(&st) {
        let why = tokio::time::timeout(WAIT, s.changed()).await;
        assert_eq!(why, Ok(Signalled::NeverOpened));
    }
    assert!(shelf.change_signal(&st).is_none(), "a shelf has no stream");
}
