//! The Redfish managers against the rack simulator over real HTTP: every
//! power code per kind, status reads, firmware updates to a new and to the
//! current version, decommission, and each injected fault producing the
//! right error class.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_hardware::{
    Capability, ComponentManager, ComponentTarget, DecommissionState, FirmwareRequest,
    FirmwareStart, FirmwareState, HardwareError, ManagerRegistry, PowerSent, PowerStatus,
};
use flow_rack_sim::{InitialPower, SimConfig, Simulator};
use flow_redfish::CredentialStore;
use flow_redfish::lifecycle::LifecycleClient;
use flow_redfish::{RedfishManager, RedfishSettings};
use flow_rules::{ComponentType, PowerOperation};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);

struct Env {
    sim: Simulator,
    registry: ManagerRegistry,
    targets: HashMap<String, ComponentTarget>,
    http: reqwest::Client,
}

impl Env {
    async fn new(initial_power: InitialPower) -> Env {
        let sim = flow_rack_sim::start(SimConfig {
            admin_port: 0,
            time_scale: 0.01,
            initial_power,
            compute: 2,
            nvswitch: 2,
            powershelf: 2,
            // Updates name images no origin serves: the update API alone.
            fetch_images: false,
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
        let settings = RedfishSettings::default();
        let lifecycle = LifecycleClient::new(
            &format!("{}/lifecycle/v1", sim.admin_url()),
            settings.http_client().unwrap(),
            Arc::clone(&credentials),
            "sim-bmc",
        );
        let mut registry = ManagerRegistry::new();
        for t in [
            ComponentType::Compute,
            ComponentType::NVSwitch,
            ComponentType::PowerShelf,
        ] {
            registry.register(Arc::new(
                RedfishManager::new(
                    t,
                    &settings,
                    Arc::clone(&credentials),
                    Some(lifecycle.clone()),
                )
                .unwrap(),
            ));
        }
        let rack = sim.inventory().into_iter().next().expect("one rack");
        let targets = rack
            .components
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    ComponentTarget {
                        rack: rack.name.clone(),
                        name: c.name.clone(),
                        component_type: c.component_type.parse().unwrap(),
                        bmc_url: c.bmc_url.clone(),
                        credential_ref: c.credential_ref.clone(),
                        resource_id: None,
                    },
                )
            })
            .collect();
        Env {
            sim,
            registry,
            targets,
            http: reqwest::Client::new(),
        }
    }

    fn target(&self, name: &str) -> &ComponentTarget {
        &self.targets[name]
    }

    fn manager(&self, name: &str) -> &Arc<dyn ComponentManager> {
        self.registry.get(self.target(name).component_type).unwrap()
    }

    async fn power(&self, name: &str, op: PowerOperation) -> Result<PowerSent, HardwareError> {
        self.manager(name)
            .power_control(self.target(name), op)
            .await
    }

    async fn status(&self, name: &str) -> Result<PowerStatus, HardwareError> {
        self.manager(name).power_status(self.target(name)).await
    }

    /// Polls until the component reports `want` (bounded).
    async fn wait_for(&self, name: &str, want: PowerStatus) {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.status(name).await {
                Ok(s) if s == want => return,
                other if Instant::now() > deadline => {
                    panic!("{name}: never {want:?}, last {other:?}")
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    async fn fault(&self, fault: Value) {
        let r = self
            .http
            .post(format!("{}/admin/v1/faults", self.sim.admin_url()))
            .json(&fault)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "fault {fault} refused: {}",
            r.status()
        );
    }

    async fn clear_faults(&self) {
        self.http
            .delete(format!("{}/admin/v1/faults", self.sim.admin_url()))
            .send()
            .await
            .unwrap();
    }

    async fn commands(&self, name: &str) -> Vec<Value> {
        let state: Value = self
            .http
            .get(format!("{}/admin/v1/state", self.sim.admin_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state["racks"][0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["commands"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
    }
}

/// Polls an update until it ends (bounded).
async fn finish(
    manager: &dyn ComponentManager,
    target: &ComponentTarget,
    job: &flow_hardware::FirmwareJob,
) -> flow_hardware::FirmwareStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = manager.firmware_status(target, Some(job)).await.unwrap();
        if matches!(s.state, FirmwareState::Completed | FirmwareState::Failed) {
            return s;
        }
        assert!(Instant::now() < deadline, "update never finished: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn issued(sent: PowerSent) -> String {
    sent.reset_type
}

/// A BMC's refusal of a command for the state its component is in.
fn refused_for_state(e: &HardwareError) -> bool {
    matches!(e, HardwareError::Http { status: 409, .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_power_code_on_compute_and_switch_trays() {
    let env = Env::new(InitialPower::On).await;
    for tray in ["compute-01", "nvswitch-01"] {
        env.wait_for(tray, PowerStatus::On).await;
        // The manager sends what it is asked (whether to send is decided
        // above it, from the state read: flow_hardware::command). A power-on
        // of what is on is the BMC's to refuse, and it logs nothing.
        for op in [PowerOperation::PowerOn, PowerOperation::ForcePowerOn] {
            let e = env.power(tray, op).await.unwrap_err();
            assert!(refused_for_state(&e), "{e}");
        }
        assert_eq!(
            issued(env.power(tray, PowerOperation::PowerOff).await.unwrap()),
            "GracefulShutdown"
        );
        env.wait_for(tray, PowerStatus::Off).await;
        let e = env
            .power(tray, PowerOperation::ForcePowerOff)
            .await
            .unwrap_err();
        assert!(refused_for_state(&e), "{e}");
        // So is a restart of what is off.
        let e = env.power(tray, PowerOperation::Restart).await.unwrap_err();
        assert!(refused_for_state(&e), "{e}");
        assert!(e.to_string().contains("the power is Off"), "{e}");
        assert_eq!(
            issued(env.power(tray, PowerOperation::ColdReset).await.unwrap()),
            "PowerCycle"
        );
        env.wait_for(tray, PowerStatus::On).await;
        let restarts = [
            (PowerOperation::Restart, "GracefulRestart"),
            (PowerOperation::ForceRestart, "ForceRestart"),
            (PowerOperation::WarmReset, "ForceRestart"),
            (PowerOperation::ColdReset, "PowerCycle"),
        ];
        for (op, reset) in restarts {
            assert_eq!(issued(env.power(tray, op).await.unwrap()), reset, "{op:?}");
            env.wait_for(tray, PowerStatus::On).await;
        }
        assert_eq!(
            issued(
                env.power(tray, PowerOperation::ForcePowerOff)
                    .await
                    .unwrap()
            ),
            "ForceOff"
        );
        env.wait_for(tray, PowerStatus::Off).await;
        assert_eq!(
            issued(env.power(tray, PowerOperation::ForcePowerOn).await.unwrap()),
            "ForceOn"
        );
        env.wait_for(tray, PowerStatus::On).await;
    }
    let log: Vec<_> = env
        .commands("compute-01")
        .await
        .iter()
        .map(|c| c["value"].clone())
        .collect();
    assert_eq!(
        log,
        [
            "GracefulShutdown",
            "PowerCycle",
            "GracefulRestart",
            "ForceRestart",
            "ForceRestart",
            "PowerCycle",
            "ForceOff",
            "ForceOn"
        ]
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_shelves_switch_on_and_off_only_and_feed_the_trays() {
    let env = Env::new(InitialPower::Off).await;
    assert_eq!(env.status("powershelf-01").await.unwrap(), PowerStatus::Off);
    // Tray BMCs are down while the shelves are off: a transient error.
    let e = env.status("compute-01").await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(matches!(e, HardwareError::Unreachable { .. }), "{e}");
    for shelf in ["powershelf-01", "powershelf-02"] {
        assert_eq!(
            issued(env.power(shelf, PowerOperation::PowerOn).await.unwrap()),
            "On"
        );
    }
    for shelf in ["powershelf-01", "powershelf-02"] {
        env.wait_for(shelf, PowerStatus::On).await;
    }
    // The tray BMC boots, its host still off.
    env.wait_for("compute-01", PowerStatus::Off).await;
    for op in [
        PowerOperation::Restart,
        PowerOperation::ForceRestart,
        PowerOperation::WarmReset,
        PowerOperation::ColdReset,
    ] {
        let e = env.power("powershelf-01", op).await.unwrap_err();
        assert!(
            matches!(e, HardwareError::OperationNotSupported { .. }),
            "{op:?}: {e}"
        );
        assert!(!e.is_transient());
    }
    assert_eq!(
        issued(
            env.power("powershelf-01", PowerOperation::PowerOff)
                .await
                .unwrap()
        ),
        "ForceOff"
    );
    assert_eq!(
        issued(
            env.power("powershelf-02", PowerOperation::ForcePowerOff)
                .await
                .unwrap()
        ),
        "ForceOff"
    );
    env.wait_for("powershelf-02", PowerStatus::Off).await;
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firmware_updates_to_a_new_version_and_skips_the_installed_one() {
    let env = Env::new(InitialPower::On).await;
    let tray = "compute-02";
    let manager = env.manager(tray);
    let target = env.target(tray);
    let before = manager.firmware_status(target, None).await.unwrap();
    let current = before.versions["FW_BMC_0"].clone();
    let same = FirmwareRequest {
        image_uri: format!("http://images.local/bmc.bin?version={current}"),
        version: Some(current.clone()),
        targets: vec![],
        sub_targets: Vec::new(),
    };
    assert_eq!(
        manager.firmware_update(target, &same).await.unwrap(),
        FirmwareStart::AlreadyInstalled {
            version: current.clone()
        }
    );
    let request = FirmwareRequest {
        image_uri: "http://images.local/bmc.bin?version=26.01-1".into(),
        version: Some("26.01-1".into()),
        targets: vec![],
        sub_targets: Vec::new(),
    };
    let FirmwareStart::Started(job) = manager.firmware_update(target, &request).await.unwrap()
    else {
        panic!("expected a started update");
    };
    assert!(
        job.task.starts_with("/redfish/v1/TaskService/Tasks/"),
        "{job:?}"
    );
    let done = finish(manager.as_ref(), target, &job).await;
    assert_eq!(done.state, FirmwareState::Completed, "{done:?}");
    assert_eq!(done.versions["FW_BMC_0"], "26.01-1");

    // A failing update reports Failed with the BMC's message.
    env.fault(json!({"target": "rack-01/compute-01", "kind": {"firmware_fails": {"message": "image signature invalid"}}}))
        .await;
    let failing = FirmwareRequest {
        image_uri: "http://images.local/bmc.bin?version=26.02".into(),
        version: Some("26.02".into()),
        targets: vec!["FW_BMC_0".into()],
        sub_targets: Vec::new(),
    };
    let target1 = env.target("compute-01");
    let FirmwareStart::Started(job) = manager.firmware_update(target1, &failing).await.unwrap()
    else {
        panic!("expected a started update");
    };
    let done = finish(manager.as_ref(), target1, &job).await;
    assert_eq!(done.state, FirmwareState::Failed);
    assert!(done.message.contains("image signature invalid"), "{done:?}");
    // An unknown inventory member is a permanent error naming the members.
    let bad = FirmwareRequest {
        targets: vec!["FW_NOPE".into()],
        sub_targets: Vec::new(),
        ..request.clone()
    };
    let e = manager.firmware_update(target, &bad).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("has no firmware inventory member \"FW_NOPE\""),
        "{e}"
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_through_the_lifecycle_api() {
    let env = Env::new(InitialPower::On).await;
    let name = "nvswitch-02";
    let manager = env.manager(name);
    let target = env.target(name);
    assert_eq!(
        manager.decommission_status(target).await.unwrap(),
        DecommissionState::Ready
    );
    let state = manager.decommission(target).await.unwrap();
    assert!(
        matches!(state, DecommissionState::Decommissioning(_)),
        "{state:?}"
    );
    // Idempotent.
    manager.decommission(target).await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        match manager.decommission_status(target).await.unwrap() {
            DecommissionState::Decommissioned => break,
            DecommissionState::Decommissioning(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // A manager without a lifecycle client lacks the capability.
    let bare = RedfishManager::new(
        ComponentType::NVSwitch,
        &RedfishSettings::default(),
        Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc")),
        None,
    )
    .unwrap();
    assert!(!bare.descriptor().has(Capability::DecommissionControl));
    let e = bare.decommission(target).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "the redfish manager for NVSwitch does not support decommission control"
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_map_to_the_right_error_class() {
    let env = Env::new(InitialPower::On).await;
    let tray = "compute-01";
    env.wait_for(tray, PowerStatus::On).await;

    env.fault(
        json!({"target": "rack-01/compute-01", "kind": {"fail_next": {"count": 1, "status": 500}}}),
    )
    .await;
    let e = env.status(tray).await.unwrap_err();
    assert!(
        matches!(e, HardwareError::Http { status: 500, .. }) && e.is_transient(),
        "{e}"
    );
    assert_eq!(
        env.status(tray).await.unwrap(),
        PowerStatus::On,
        "fail_next fires once"
    );

    // Two 503s with `Retry-After: 1` are waited out inside the call…
    env.fault(
        json!({"target": "rack-01/compute-01", "kind": {"fail_next": {"count": 2, "status": 503}}}),
    )
    .await;
    let started = Instant::now();
    assert_eq!(env.status(tray).await.unwrap(), PowerStatus::On);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "answered after {:?}: the Retry-After was not waited out",
        started.elapsed()
    );
    // …a BMC that keeps answering 503 is the caller's after them.
    env.fault(json!({"target": "rack-01/compute-01", "kind": {"error_rate": {"rate": 1.0, "status": 503}}})).await;
    let e = env.status(tray).await.unwrap_err();
    assert!(
        matches!(e, HardwareError::Http { status: 503, .. }) && e.is_transient(),
        "{e}"
    );
    env.clear_faults().await;

    env.fault(json!({"target": "rack-01/compute-01", "kind": {"unreachable": {}}}))
        .await;
    let e = env.status(tray).await.unwrap_err();
    assert!(
        matches!(e, HardwareError::Unreachable { .. }) && e.is_transient(),
        "{e}"
    );
    env.clear_faults().await;
    env.wait_for(tray, PowerStatus::On).await;

    // Stuck power: the command is accepted, the state never changes.
    env.fault(json!({"target": "rack-01/compute-01", "kind": {"stuck_power": {"state": "On"}}}))
        .await;
    assert_eq!(
        issued(
            env.power(tray, PowerOperation::ForcePowerOff)
                .await
                .unwrap()
        ),
        "ForceOff"
    );
    for _ in 0..5 {
        assert_eq!(env.status(tray).await.unwrap(), PowerStatus::On);
    }
    env.clear_faults().await;

    // Wrong password: 401, permanent. Unknown credential reference: permanent.
    let wrong = RedfishManager::new(
        ComponentType::Compute,
        &RedfishSettings::default(),
        Arc::new(CredentialStore::single("sim-bmc", "root", "wrong")),
        None,
    )
    .unwrap();
    let e = wrong.power_status(env.target(tray)).await.unwrap_err();
    assert!(
        matches!(e, HardwareError::Http { status: 401, .. }) && !e.is_transient(),
        "{e}"
    );
    assert!(
        !e.to_string().contains("wrong"),
        "the password leaked into {e}"
    );
    let mut unknown = env.target(tray).clone();
    unknown.credential_ref = "nope".into();
    let e = env.manager(tray).power_status(&unknown).await.unwrap_err();
    assert!(
        matches!(e, HardwareError::MissingCredential { .. }) && !e.is_transient(),
        "{e}"
    );
    env.sim.shutdown().await;
}
