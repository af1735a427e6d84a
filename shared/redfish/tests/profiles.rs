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
    ManagerRegistry, PowerOutcome, PowerStatus,
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
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
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
            Ok(PowerOutcome::Issued { reset_type }) => {
                assert_eq!(reset_type, reset, "{name} {op:?}")
            }
            other => panic!("{name} {op:?}: expected {reset} issued, got {other:?}"),
        }
        self.wait_for(name, end).await;
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
    let request = FirmwareRequest {
        image_uri: "http://images.local/bmc.bin?version=26.01-1".into(),
        version: Some("26.01-1".into()),
        targets: vec![],
        sub_targets: Vec::new(),
    };
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
    reset_200_profile_every_action => VendorProfile::Reset200,
}

#[test]
fn every_profile_has_a_test() {
    // A profile added to the simulator without a line above fails here.
    assert_eq!(VendorProfile::ALL.len(), 6);
}
