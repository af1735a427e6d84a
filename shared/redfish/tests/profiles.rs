//! The Redfish managers against every vendor profile of the simulator
//! (`services/rack-sim/src/vendor.rs`): each power code Flow sends per
//! kind, power status, a firmware update with its task and the inventory
//! read, with every command landing on the host (not a DPU or backplane
//! listed before it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_hardware::{
    ComponentManager, ComponentTarget, FirmwareRequest, FirmwareStart, FirmwareState,
    ManagerRegistry, PowerSent, PowerStatus,
};
use flow_rack_sim::{InitialPower, ProfileChoice, ProfileScope, SimConfig, VendorProfile};
use flow_redfish::{CredentialStore, RedfishSettings};
use flow_rules::PowerOperation as P;

const WAIT: Duration = Duration::from_secs(15);

struct Env {
    sim: flow_rack_sim::Simulator,
    registry: ManagerRegistry,
    targets: HashMap<String, ComponentTarget>,
}

impl Env {
    async fn new(profile: VendorProfile) -> Env {
        Self::with_credentials(
            profile,
            CredentialStore::single("sim-bmc", "root", "0penBmc"),
        )
        .await
    }

    async fn with_credentials(profile: VendorProfile, credentials: CredentialStore) -> Env {
        let sim = flow_rack_sim::start(SimConfig {
            admin_port: 0,
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 1,
            nvswitch: 1,
            powershelf: 1,
            profiles: vec![ProfileChoice {
                scope: ProfileScope::All,
                profile,
            }],
            // Updates name images no origin serves: the update API alone.
            fetch_images: false,
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let credentials = Arc::new(credentials);
        let registry =
            flow_redfish::registry(&RedfishSettings::default(), credentials, None).unwrap();
        let rack = sim.inventory().into_iter().next().expect("one rack");
        let targets = rack
            .components
            .iter()
            .map(|c| {
                let target = ComponentTarget {
                    rack: rack.name.clone(),
                    name: c.name.clone(),
                    component_type: c.component_type.parse().unwrap(),
                    bmc_url: c.bmc_url.clone(),
                    credential_ref: c.credential_ref.clone(),
                    resource_id: None,
                };
                (c.name.clone(), target)
            })
            .collect();
        Env {
            sim,
            registry,
            targets,
        }
    }

    fn manager(&self, name: &str) -> (&Arc<dyn ComponentManager>, &ComponentTarget) {
        let target = &self.targets[name];
        (self.registry.get(target.component_type).unwrap(), target)
    }

    async fn status(&self, name: &str) -> PowerStatus {
        let (m, t) = self.manager(name);
        m.power_status(t)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    async fn wait_for(&self, name: &str, want: PowerStatus) {
        let deadline = Instant::now() + WAIT;
        loop {
            let now = self.status(name).await;
            if now == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: never {want:?}, last {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `op`, expects `reset` to be issued, waits for `end`.
    async fn command(&self, name: &str, op: P, reset: &str, end: PowerStatus) {
        let (m, t) = self.manager(name);
        match m.power_control(t, op).await {
            Ok(PowerSent { reset_type }) => {
                assert_eq!(reset_type, reset, "{name} {op:?}")
            }
            other => panic!("{name} {op:?}: expected {reset} issued, got {other:?}"),
        }
        self.wait_for(name, end).await;
    }

    /// Every BMC drops its sessions.
    async fn sim_expire(&self) {
        let r = reqwest::Client::new()
            .post(format!("{}/admin/v1/sessions/expire", self.sim.admin_url()))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }

    /// Resets the simulator recorded on a component's own power resource.
    fn resets(&self, name: &str) -> Vec<String> {
        let state = self.sim.state();
        state
            .component("rack-01", name)
            .expect("component")
            .commands
            .iter()
            .filter(|c| c.kind == flow_rack_sim::CommandKind::Reset)
            .map(|c| c.value.clone())
            .collect()
    }
}

/// An update of the main firmware to 26.01-1.
fn bmc_update() -> FirmwareRequest {
    FirmwareRequest {
        image_uri: "http://images.local/bmc.bin?version=26.01-1".into(),
        version: Some("26.01-1".into()),
        targets: vec![],
        sub_targets: Vec::new(),
    }
}

async fn every_action(profile: VendorProfile) {
    let env = Env::new(profile).await;
    for name in ["compute-01", "nvswitch-01", "powershelf-01"] {
        assert_eq!(env.status(name).await, PowerStatus::On, "{profile}: {name}");
    }
    let tray = "compute-01";
    env.command(tray, P::PowerOff, "GracefulShutdown", PowerStatus::Off)
        .await;
    env.command(tray, P::PowerOn, "On", PowerStatus::On).await;
    env.command(tray, P::Restart, "GracefulRestart", PowerStatus::On)
        .await;
    env.command(tray, P::ForceRestart, "ForceRestart", PowerStatus::On)
        .await;
    env.command(tray, P::ForcePowerOff, "ForceOff", PowerStatus::Off)
        .await;
    env.command(tray, P::ForcePowerOn, "ForceOn", PowerStatus::On)
        .await;
    assert_eq!(
        env.resets(tray),
        [
            "GracefulShutdown",
            "On",
            "GracefulRestart",
            "ForceRestart",
            "ForceOff",
            "ForceOn"
        ],
        "{profile}: every command on the host"
    );
    let switch = "nvswitch-01";
    env.command(switch, P::PowerOff, "GracefulShutdown", PowerStatus::Off)
        .await;
    env.command(switch, P::PowerOn, "On", PowerStatus::On).await;
    assert_eq!(env.resets(switch), ["GracefulShutdown", "On"], "{profile}");

    // Firmware: the inventory read, an update with its task.
    let (m, t) = env.manager(tray);
    let before = m.firmware_status(t, None).await.unwrap();
    assert!(
        before.versions.contains_key("FW_BMC_0"),
        "{profile}: {before:?}"
    );
    let request = bmc_update();
    let FirmwareStart::Started(job) = m.firmware_update(t, &request).await.unwrap() else {
        panic!("{profile}: expected a started update");
    };
    let deadline = Instant::now() + WAIT;
    let done = loop {
        let s = m.firmware_status(t, Some(&job)).await.unwrap();
        if matches!(s.state, FirmwareState::Completed | FirmwareState::Failed) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{profile}: update never finished: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done.state, FirmwareState::Completed, "{profile}: {done:?}");
    assert_eq!(done.versions["FW_BMC_0"], "26.01-1");

    // The shelf last: off takes the rack's power.
    let shelf = "powershelf-01";
    env.command(shelf, P::PowerOff, "ForceOff", PowerStatus::Off)
        .await;
    env.command(shelf, P::PowerOn, "On", PowerStatus::On).await;
    assert_eq!(env.resets(shelf), ["ForceOff", "On"], "{profile}");
    // One session per BMC, reused by every request; logged out on close.
    assert_eq!(env.sim.state().logins_total, 3, "{profile}");
    env.registry.close_all().await;
    assert_eq!(env.sim.state().sessions_open, 0, "{profile}: logged out");
    env.sim.shutdown().await;
}

macro_rules! profile_tests {
    ($($name:ident => $profile:expr),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            every_action($profile).await;
        }
    )*};
}

profile_tests! {
    standard_profile_every_action => VendorProfile::Standard,
    no_links_profile_every_action => VendorProfile::NoLinks,
    uuid_ids_profile_every_action => VendorProfile::UuidIds,
    multi_system_profile_every_action => VendorProfile::MultiSystem,
    action_info_profile_every_action => VendorProfile::ActionInfo,
    session_only_profile_every_action => VendorProfile::SessionOnly,
    reset_200_profile_every_action => VendorProfile::Reset200,
    if_match_profile_every_action => VendorProfile::IfMatch,
}

#[test]
fn every_profile_has_a_test() {
    // A profile added to the simulator without a line above fails here.
    assert_eq!(VendorProfile::ALL.len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_is_replaced_mid_task_without_a_failed_call() {
    let env = Env::new(VendorProfile::SessionOnly).await;
    let tray = "compute-01";
    env.command(tray, P::PowerOff, "GracefulShutdown", PowerStatus::Off)
        .await;
    // An update under way when the BMC drops every session.
    let (m, t) = env.manager(tray);
    let request = bmc_update();
    let FirmwareStart::Started(job) = m.firmware_update(t, &request).await.unwrap() else {
        panic!("expected a started update");
    };
    let expired: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/admin/v1/sessions/expire", env.sim.admin_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(expired["expired"], 1, "{expired}");
    // The task poll (plain JSON) and the inventory (nv-redfish) both log in
    // again on the 401 and answer.
    let deadline = Instant::now() + WAIT;
    loop {
        let s = m
            .firmware_status(t, Some(&job))
            .await
            .expect("no failed call after the drop");
        if s.state == FirmwareState::Completed {
            break;
        }
        assert_ne!(s.state, FirmwareState::Failed, "{s:?}");
        assert!(Instant::now() < deadline, "update never finished: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Power after the drop as well.
    env.sim_expire().await;
    env.command(tray, P::PowerOn, "On", PowerStatus::On).await;
    assert_eq!(
        env.sim.state().logins_total,
        3,
        "one login, and one after each drop"
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_where_a_bmc_takes_only_sessions_is_a_permanent_401() {
    let mut credentials = CredentialStore::single("sim-bmc", "root", "0penBmc");
    credentials.set_auth("sim-bmc", flow_redfish::AuthMode::Basic);
    let env = Env::with_credentials(VendorProfile::SessionOnly, credentials).await;
    let (m, t) = env.manager("compute-01");
    let e = m.power_status(t).await.unwrap_err();
    assert!(e.to_string().contains("HTTP 401"), "{e}");
    assert!(!e.is_transient(), "{e}");
    assert_eq!(env.sim.state().logins_total, 0);
    // The same credential with sessions: one login, and it works.
    let env = Env::new(VendorProfile::Standard).await;
    assert_eq!(env.status("compute-01").await, PowerStatus::On);
    assert_eq!(env.sim.state().logins_total, 1);
}
