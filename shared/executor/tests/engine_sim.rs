//! The step executor against the rack simulator over HTTP: stage order with
//! the planner, `max_parallel` honoured, retries with the configured
//! backoff, permanent errors not retried, waits expressed as times to come
//! back, resumption from a serialised checkpoint, cancellation at an action
//! boundary, firmware and decommission; and no command dropped while the
//! hardware moves — a power-off right after a restart, a forced power-off
//! in the middle of one, a restart of trays powering on — nor repeated by a
//! delivery resumed after its worker was killed, read from the simulator's
//! own command log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flow_decisions::plan;
use flow_executor::gate::Ungated;
use flow_executor::{
    Checkpoint, Clock, Effects, FirmwareImage, MemoryJournal, Progress, StepJob, SystemClock,
    advance,
};
use flow_hardware::{
    ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareStatus, HardwareError, ManagerDescriptor, ManagerRegistry, PowerSent,
    PowerStatus,
};
use flow_rack_sim::{InitialPower, SimConfig, Simulator};
use flow_redfish::CredentialStore;
use flow_redfish::lifecycle::LifecycleClient;
use flow_redfish::{RedfishManager, RedfishSettings};
use flow_rules::{ComponentType, OperationCode, PowerOperation, RuleDefinition};
use serde_json::json;

/// Wraps a real manager and records the peak number of concurrent calls.
struct Counting {
    inner: Arc<dyn ComponentManager>,
    now: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
}

impl Counting {
    fn enter(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl ComponentManager for Counting {
    fn descriptor(&self) -> &ManagerDescriptor {
        self.inner.descriptor()
    }
    async fn power_control(
        &self,
        t: &ComponentTarget,
        op: PowerOperation,
    ) -> Result<PowerSent, HardwareError> {
        self.enter();
        let r = self.inner.power_control(t, op).await;
        self.leave();
        r
    }
    async fn power_status(&self, t: &ComponentTarget) -> Result<PowerStatus, HardwareError> {
        self.enter();
        let r = self.inner.power_status(t).await;
        self.leave();
        r
    }
    async fn firmware_update(
        &self,
        t: &ComponentTarget,
        r: &FirmwareRequest,
    ) -> Result<FirmwareStart, HardwareError> {
        self.inner.firmware_update(t, r).await
    }
    async fn firmware_status(
        &self,
        t: &ComponentTarget,
        j: Option<&FirmwareJob>,
    ) -> Result<FirmwareStatus, HardwareError> {
        self.inner.firmware_status(t, j).await
    }
    async fn decommission(&self, t: &ComponentTarget) -> Result<DecommissionState, HardwareError> {
        self.inner.decommission(t).await
    }
    async fn decommission_status(
        &self,
        t: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        self.inner.decommission_status(t).await
    }
}

struct Env {
    sim: Simulator,
    registry: ManagerRegistry,
    counting: BTreeMap<ComponentType, Arc<Counting>>,
    targets: Vec<ComponentTarget>,
    http: reqwest::Client,
    journal: MemoryJournal,
    listening: flow_executor::wake::Listening,
}

impl Env {
    async fn new(initial_power: InitialPower, compute: usize) -> Env {
        Env::scaled(initial_power, compute, 0.01).await
    }

    /// A rack whose physics run at `time_scale` of real time.
    async fn scaled(initial_power: InitialPower, compute: usize, time_scale: f64) -> Env {
        let sim = flow_rack_sim::start(SimConfig {
            admin_port: 0,
            time_scale,
            initial_power,
            compute,
            nvswitch: 2,
            powershelf: 2,
            ..SimConfig::default()
        })
        .await
        .expect("simulator");
        let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
        let settings = RedfishSettings::default();
        let lifecycle = LifecycleClient::new(
            &format!("{}/lifecycle/v1", sim.admin_url()),
            settings.http_client().unwrap(),
            Arc::clone(&credentials),
            "sim-bmc",
        );
        let mut registry = ManagerRegistry::new();
        let mut counting = BTreeMap::new();
        for t in [
            ComponentType::Compute,
            ComponentType::NVSwitch,
            ComponentType::PowerShelf,
        ] {
            let inner: Arc<dyn ComponentManager> = Arc::new(
                RedfishManager::new(
                    t,
                    &settings,
                    Arc::clone(&credentials),
                    Some(lifecycle.clone()),
                )
                .unwrap(),
            );
            let c = Arc::new(Counting {
                inner,
                now: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
                calls: AtomicUsize::new(0),
            });
            counting.insert(t, Arc::clone(&c));
            registry.register(c);
        }
        let rack = sim.inventory().remove(0);
        let targets = rack
            .components
            .iter()
            .map(|c| ComponentTarget {
                rack: rack.name.clone(),
                name: c.name.clone(),
                component_type: c.component_type.parse().unwrap(),
                bmc_url: c.bmc_url.clone(),
                credential_ref: c.credential_ref.clone(),
                resource_id: None,
            })
            .collect();
        Env {
            sim,
            registry,
            counting,
            targets,
            http: reqwest::Client::new(),
            journal: MemoryJournal::default(),
            listening: flow_executor::wake::Listening::default(),
        }
    }

    fn all(&self) -> BTreeMap<ComponentType, Vec<ComponentTarget>> {
        let mut m: BTreeMap<ComponentType, Vec<ComponentTarget>> = BTreeMap::new();
        for t in &self.targets {
            m.entry(t.component_type).or_default().push(t.clone());
        }
        m
    }

    fn job(&self, rule: &RuleDefinition, step_index: usize, operation: &str) -> StepJob {
        let step = rule.steps[step_index].clone();
        let all = self.all();
        StepJob {
            operation: operation.parse::<OperationCode>().unwrap(),
            components: all.get(&step.component_type).cloned().unwrap_or_default(),
            step,
            all_components: all,
            firmware: BTreeMap::new(),
            power_domains: Vec::new(),
            emergency: false,
        }
    }

    /// What a step acts through against this simulator: ungated, its
    /// record kept in memory.
    fn effects<'a>(
        &'a self,
        clock: &'a dyn Clock,
        cancelled: &'a (dyn Fn() -> bool + Sync),
    ) -> Effects<'a> {
        Effects {
            hardware: &self.registry,
            clock,
            gate: &Ungated,
            images: &flow_executor::images::OriginUnverified,
            journal: &self.journal,
            observer: &flow_executor::Unobserved,
            cancelled,
            listening: &self.listening,
        }
    }

    async fn fault(&self, fault: serde_json::Value) {
        let r = self
            .http
            .post(format!("{}/admin/v1/faults", self.sim.admin_url()))
            .json(&fault)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
}

/// Runs a step to its end like a worker: advance, serialise the checkpoint
/// (another worker could pick it up), wait until the time it names. Returns
/// the end, the checkpoint and, for every wait, how far after the start of
/// that `advance` it asked to come back (ms).
async fn run(job: &StepJob, registry: &ManagerRegistry) -> (Progress, Checkpoint, Vec<u64>) {
    run_with(job, registry, &|| false).await
}

async fn run_with(
    job: &StepJob,
    registry: &ManagerRegistry,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> (Progress, Checkpoint, Vec<u64>) {
    // The job itself travels as JSON too.
    let job: StepJob = serde_json::from_str(&serde_json::to_string(job).unwrap()).unwrap();
    let clock = SystemClock;
    let mut saved = serde_json::to_string(&Checkpoint::default()).unwrap();
    let mut waits = Vec::new();
    let deadline = clock.now_ms() + 30_000;
    loop {
        let mut cp: Checkpoint = serde_json::from_str(&saved).unwrap();
        let before = clock.now_ms();
        let journal = MemoryJournal::default();
        // A new run each time, as a redelivery to another worker.
        let listening = flow_executor::wake::Listening::default();
        let fx = Effects {
            hardware: registry,
            clock: &clock,
            gate: &Ungated,
            images: &flow_executor::images::OriginUnverified,
            journal: &journal,
            observer: &flow_executor::Unobserved,
            cancelled,
            listening: &listening,
        };
        let progress = advance(&job, &mut cp, &fx).await;
        saved = serde_json::to_string(&cp).unwrap();
        match progress {
            Progress::WaitUntil(t) => {
                let now = clock.now_ms();
                assert!(now < deadline, "step never finished");
                waits.push(t.saturating_sub(before));
                tokio::time::sleep(Duration::from_millis(t.saturating_sub(now))).await;
            }
            other => return (other, serde_json::from_str(&saved).unwrap(), waits),
        }
    }
}

fn rule(steps: serde_json::Value) -> RuleDefinition {
    RuleDefinition::from_value(&json!({"steps": steps})).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_power_on_runs_stage_by_stage_and_honours_max_parallel() {
    let env = Env::new(InitialPower::Off, 5).await;
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "10s", "poll_interval": "20ms", "parameters": {"expected_status": "on"}});
    let power_on = rule(json!([
        {"component_type": "powershelf", "stage": 1, "max_parallel": 1, "main_operation": {"name": "PowerControl"},
         "post_operation": [verify, {"name": "VerifyReachability", "timeout": "10s", "poll_interval": "20ms",
                                     "parameters": {"component_types": ["compute", "nvswitch"], "require_all": true}},
                            {"name": "Sleep", "parameters": {"duration": "50ms"}}]},
        {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": "compute", "stage": 3, "max_parallel": 2, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": "cdu", "stage": 3, "main_operation": {"name": "PowerControl"}}
    ]));
    let plan = plan(&power_on, &env.targets).unwrap();
    assert!(plan.stages[2].steps[1].skipped, "no CDU in the rack");
    // Slow calls so that concurrency would show.
    env.fault(json!({"target": "rack-01/compute-*", "kind": {"latency": {"ms": 30}}}))
        .await;
    let mut compute_peak = 0;
    for stage in &plan.stages {
        // Count concurrency per stage (stage 1 probes compute BMCs for reachability).
        env.counting[&ComponentType::Compute]
            .peak
            .store(0, Ordering::SeqCst);
        let jobs: Vec<StepJob> = stage
            .steps
            .iter()
            .filter(|s| !s.skipped)
            .map(|s| env.job(&power_on, s.step_index, "power_on"))
            .collect();
        let results = futures::future::join_all(jobs.iter().map(|j| run(j, &env.registry))).await;
        for (progress, cp, _) in results {
            assert_eq!(
                progress,
                Progress::Done,
                "stage {}: {cp:?}",
                stage.stage.get()
            );
        }
        if stage.stage.get() == 3 {
            compute_peak = env.counting[&ComponentType::Compute]
                .peak
                .load(Ordering::SeqCst);
        }
    }
    for t in &env.targets {
        let status = env
            .registry
            .get(t.component_type)
            .unwrap()
            .power_status(t)
            .await
            .unwrap();
        assert_eq!(status, PowerStatus::On, "{}", t.name);
    }
    assert_eq!(
        compute_peak, 2,
        "max_parallel 2: never more, and not one at a time"
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_are_retried_with_the_configured_backoff_and_permanent_ones_are_not() {
    let env = Env::new(InitialPower::On, 1).await;
    // Two 503s, then success: three attempts, waits of 100 ms then 300 ms.
    env.fault(
        json!({"target": "rack-01/compute-01", "kind": {"fail_next": {"count": 2, "status": 503}}}),
    )
    .await;
    let off = rule(json!([{"component_type": "compute", "stage": 1,
        "retry": {"max_attempts": 3, "initial_interval": "100ms", "backoff_coefficient": 3.0},
        "main_operation": {"name": "PowerControl", "parameters": {"operation": "force_power_off"}}}]));
    let (progress, cp, waits) = run(&env.job(&off, 0, "power_off"), &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    assert_eq!(cp.results["compute-01"], "sent ForceOff");
    assert_eq!(waits.len(), 2, "{waits:?}");
    // Each retry comes back no earlier than its backoff: 100 ms, then
    // 100 ms × 3. (The upper bound only guards against a wrong formula; the
    // call itself takes some time on a loaded machine.)
    assert!((100..600).contains(&waits[0]), "{waits:?}");
    assert!((300..800).contains(&waits[1]), "{waits:?}");

    // Attempts exhausted.
    env.fault(
        json!({"target": "rack-01/compute-01", "kind": {"fail_next": {"count": 5, "status": 500}}}),
    )
    .await;
    let two = rule(json!([{"component_type": "compute", "stage": 1,
        "retry": {"max_attempts": 2, "initial_interval": "10ms", "backoff_coefficient": 1.0},
        "main_operation": {"name": "GetPowerStatus", "timeout": "5s"}}]));
    let Progress::Failed(f) = run(&env.job(&two, 0, "power_on"), &env.registry).await.0 else {
        panic!("expected failure")
    };
    assert!(
        f.message.contains("HTTP 500") && f.message.contains("(after 2 attempts)"),
        "{f}"
    );

    // A permanent error fails at once: one call, no retry.
    let before = env.counting[&ComponentType::PowerShelf]
        .calls
        .load(Ordering::SeqCst);
    let restart_shelf = rule(json!([{"component_type": "powershelf", "stage": 1,
        "main_operation": {"name": "PowerControl", "parameters": {"operation": "restart"}}}]));
    let mut job = env.job(&restart_shelf, 0, "restart");
    job.components.truncate(1);
    let Progress::Failed(f) = run(&job, &env.registry).await.0 else {
        panic!("expected failure")
    };
    assert!(f.message.contains("power shelves cannot restart"), "{f}");
    // The state read, then the command refused: not tried again.
    assert_eq!(
        env.counting[&ComponentType::PowerShelf]
            .calls
            .load(Ordering::SeqCst)
            - before,
        2
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_returned_not_slept_and_verification_times_out_on_a_stuck_component() {
    let env = Env::new(InitialPower::On, 1).await;
    let sleepy = rule(json!([{"component_type": "compute", "stage": 1,
        "pre_operation": [{"name": "Sleep", "parameters": {"duration": "2s"}}],
        "main_operation": {"name": "GetPowerStatus", "timeout": "5s"}}]));
    let job = env.job(&sleepy, 0, "power_on");
    let mut cp = Checkpoint::default();
    let clock = SystemClock;
    let t0 = clock.now_ms();
    let Progress::WaitUntil(until) = advance(&job, &mut cp, &env.effects(&clock, &|| false)).await
    else {
        panic!("a sleep must be returned as a wait")
    };
    assert!(
        until >= t0 + 2000 && clock.now_ms() < until,
        "advance returned at once"
    );
    let (progress, cp, _) = run(&job, &env.registry).await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(cp.finished.len(), 2);
    assert!(cp.finished[0].ended_ms - cp.finished[0].started_ms >= 2000);

    env.fault(json!({"target": "rack-01/compute-01", "kind": {"stuck_power": {"state": "On"}}}))
        .await;
    let verify_off = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl", "parameters": {"operation": "force_power_off"}},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "300ms", "poll_interval": "50ms",
                            "parameters": {"expected_status": "off"}}]}]));
    let Progress::Failed(f) = run(&env.job(&verify_off, 0, "power_off"), &env.registry)
        .await
        .0
    else {
        panic!("a stuck component must fail verification")
    };
    assert_eq!(f.action, "post_operation[0] (VerifyPowerStatus)");
    assert!(
        f.message.contains("still On after 300ms waiting for Off"),
        "{f}"
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_stops_at_the_next_action_boundary() {
    let env = Env::new(InitialPower::On, 1).await;
    let two = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "GetPowerStatus", "timeout": "5s"},
        "post_operation": [{"name": "PowerControl", "parameters": {"operation": "force_power_off"}}]}]));
    let job = env.job(&two, 0, "power_off");
    let mut cp = Checkpoint::default();
    let calls = std::sync::atomic::AtomicUsize::new(0);
    // Not cancelled for the first action, cancelled before the second.
    let cancelled = || calls.fetch_add(1, Ordering::SeqCst) >= 1;
    let p = advance(&job, &mut cp, &env.effects(&SystemClock, &cancelled)).await;
    assert_eq!(p, Progress::Cancelled);
    assert_eq!(
        cp.action, 1,
        "the first action finished, the second never started"
    );
    let t = &env.targets.iter().find(|t| t.name == "compute-01").unwrap();
    assert_eq!(
        env.registry
            .get(ComponentType::Compute)
            .unwrap()
            .power_status(t)
            .await
            .unwrap(),
        PowerStatus::On
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firmware_and_decommission_steps() {
    let env = Env::new(InitialPower::On, 2).await;
    let upgrade = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "50ms", "poll_timeout": "10s"}}}]));
    let mut job = env.job(&upgrade, 0, "upgrade");
    // The image on the simulator's own origin: its BMCs fetch it.
    let admin = env.sim.admin_url();
    let put: serde_json::Value = reqwest::Client::new()
        .put(format!("{admin}/admin/v1/files/bmc-26.03.bin"))
        .body(b"bmc firmware 26.03".to_vec())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = put["digest"].as_str().unwrap().to_owned();
    job.firmware.insert(
        ComponentType::Compute,
        FirmwareImage {
            image_uri: format!("{admin}/files/bmc-26.03.bin"),
            version: Some("26.03".into()),
            sub_targets: Vec::new(),
            digest: Some(digest.clone()),
            size: None,
        },
    );
    let (progress, cp, _) = run(&job, &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    assert_eq!(cp.results["compute-02"], "installed 26.03");
    let state = env.sim.state();
    let update = state
        .component("rack-01", "compute-02")
        .unwrap()
        .commands
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        update.digest.as_deref(),
        Some(digest.as_str()),
        "{update:?}"
    );
    // Two updates started: two commands; the task polls only read.
    assert_eq!(cp.commands, 2, "{cp:?}");
    assert!(cp.calls > cp.commands, "{cp:?}");
    // Again: already installed, no update started.
    let (progress, cp, _) = run(&job, &env.registry).await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(cp.results["compute-01"], "already at 26.03");
    assert_eq!(cp.commands, 0, "nothing changed: {cp:?}");
    // No image for the type: a clear permanent failure.
    job.firmware.clear();
    let Progress::Failed(f) = run(&job, &env.registry).await.0 else {
        panic!("expected failure")
    };
    assert!(
        f.message.contains("names no firmware image for Compute"),
        "{f}"
    );

    let decommission = rule(json!([{"component_type": "nvswitch", "stage": 1,
        "main_operation": {"name": "DecommissionControl"},
        "post_operation": [{"name": "WaitDecommissioned", "timeout": "10s", "poll_interval": "20ms"}]}]));
    let job = env.job(&decommission, 0, "decommission");
    let (progress, cp, _) = run(&job, &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    assert_eq!(cp.results["nvswitch-01"], "Decommissioned");
    // One request per switch tray is a command; the waits only read.
    assert_eq!(cp.commands, job.components.len() as u64, "{cp:?}");
    env.sim.shutdown().await;
}

/// The commands the simulator accepted from `component`, in order (the
/// `ResetType`, the image URI, or `decommission`).
fn sim_commands(env: &Env, component: &str) -> Vec<String> {
    env.sim
        .state()
        .component("rack-01", component)
        .unwrap_or_else(|| panic!("no {component}"))
        .commands
        .iter()
        .map(|c| c.value.clone())
        .collect()
}

fn sim_power(env: &Env, component: &str) -> String {
    env.sim
        .state()
        .component("rack-01", component)
        .unwrap()
        .power_state
        .to_string()
}

fn trays(env: &Env) -> Vec<String> {
    env.targets
        .iter()
        .filter(|t| t.component_type == ComponentType::Compute)
        .map(|t| t.name.clone())
        .collect()
}

/// The calls a component's action made, by the record.
fn action_calls(cp: &Checkpoint, component: &str, action: &str) -> u32 {
    cp.history[component]
        .iter()
        .filter(|a| a.action == action)
        .map(|a| a.attempts)
        .sum()
}

const SEND_ONLY: &str = "main_operation (PowerControl)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_power_off_right_after_a_restart_reaches_every_bmc() {
    // 5 % of real time: a graceful restart is 500 ms down, 250 ms up.
    let env = Env::scaled(InitialPower::On, 4, 0.05).await;
    // A rule that only sends the command, as a rollout's retry might run.
    let restart = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"}}]));
    let (progress, cp, _) = run(&env.job(&restart, 0, "restart"), &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    // At once, a graceful power-off of the same trays.
    let off = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "10s", "poll_interval": "50ms",
                            "parameters": {"expected_status": "off"}}]}]));
    let (progress, cp, _) = run(&env.job(&off, 0, "power_off"), &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    for tray in trays(&env) {
        assert_eq!(
            sim_commands(&env, &tray),
            ["GracefulRestart", "GracefulShutdown"],
            "{tray}: the power-off reached its BMC after the restart"
        );
        assert_eq!(sim_power(&env, &tray), "Off", "{tray}");
        assert_eq!(cp.results[&tray], "Off");
        // It read the tray moving (the restart), read it again once On,
        // and sent: it waited for the restart, it did not take it for an off.
        assert!(
            action_calls(&cp, &tray, SEND_ONLY) >= 3,
            "{tray}: {:?}",
            cp.history[&tray]
        );
    }
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_power_off_during_a_restart_reaches_the_bmc_at_once_and_the_tray_stays_off() {
    let env = Env::scaled(InitialPower::On, 6, 0.05).await;
    let restart = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"}}]));
    let (progress, _, _) = run(&env.job(&restart, 0, "restart"), &env.registry).await;
    assert_eq!(progress, Progress::Done);
    let restarted = Instant::now();
    // A leak on compute-05 0.3 s into the restart: the built-in leak rule's
    // force power-off of it and the trays below it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sim_power(&env, "compute-05"), "PoweringOff", "mid-restart");
    let force_off = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "2m", "poll_interval": "50ms",
                            "parameters": {"expected_status": "off"}}]}]));
    let mut job = env.job(&force_off, 0, "force_power_off");
    job.components.retain(|c| c.name.as_str() >= "compute-05");
    let leak = Instant::now();
    let (progress, cp, _) = run(&job, &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    assert!(
        leak.elapsed() < Duration::from_secs(10),
        "the force-off took {:?}",
        leak.elapsed()
    );
    for tray in ["compute-05", "compute-06"] {
        assert_eq!(cp.results[tray], "Off");
        assert_eq!(
            sim_commands(&env, tray),
            ["GracefulRestart", "ForceOff"],
            "{tray}"
        );
    }
    // Past the restart's own end (750 ms after it began, at this scale),
    // the trays that were forced off stay off; the others come back on.
    while restarted.elapsed() < Duration::from_millis(1_500) {
        assert_eq!(sim_power(&env, "compute-05"), "Off", "powered again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sim_power(&env, "compute-06"), "Off");
    assert_eq!(
        sim_power(&env, "compute-01"),
        "On",
        "not in the leak's reach"
    );
    env.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_sent_while_the_trays_power_on_restarts_them() {
    let env = Env::scaled(InitialPower::On, 3, 0.05).await;
    let send_only = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"}}]));
    for op in ["force_power_off", "power_on"] {
        let (progress, cp, _) = run(&env.job(&send_only, 0, op), &env.registry).await;
        assert_eq!(progress, Progress::Done, "{op}: {cp:?}");
        if op == "force_power_off" {
            // Settled off before powering on again.
            for tray in trays(&env) {
                let deadline = Instant::now() + Duration::from_secs(5);
                while sim_power(&env, &tray) != "Off" {
                    assert!(Instant::now() < deadline, "{tray} never went off");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
    // The trays are powering on (250 ms at this scale): restart them now.
    let restart = rule(json!([{"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "10s", "poll_interval": "50ms",
                            "parameters": {"expected_status": "on"}}]}]));
    let (progress, cp, _) = run(&env.job(&restart, 0, "restart"), &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    for tray in trays(&env) {
        assert_eq!(
            sim_commands(&env, &tray),
            ["ForceOff", "On", "GracefulRestart"],
            "{tray}: restarted once it was on"
        );
        assert!(
            action_calls(&cp, &tray, SEND_ONLY) >= 3,
            "{tray}: it waited"
        );
    }
    env.sim.shutdown().await;
}

/// A journal standing for a worker's job-state bucket whose worker is
/// killed at its `crash_at`-th write: that write never lands, and the
/// executor's future is dropped mid-step.
struct Crashing {
    crash_at: usize,
    writes: AtomicUsize,
    kept: std::sync::Mutex<Option<Checkpoint>>,
    crashed: tokio::sync::Notify,
}

impl Crashing {
    fn new(crash_at: usize) -> Self {
        Crashing {
            crash_at,
            writes: AtomicUsize::new(0),
            kept: std::sync::Mutex::new(None),
            crashed: tokio::sync::Notify::new(),
        }
    }
}

impl flow_executor::Journal for Crashing {
    fn keep<'a>(&'a self, cp: &'a Checkpoint) -> futures::future::BoxFuture<'a, bool> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.crash_at {
            self.crashed.notify_one();
            return Box::pin(std::future::pending());
        }
        *self.kept.lock().unwrap() = Some(cp.clone());
        Box::pin(async { true })
    }
}

/// Runs `job` until its worker is "killed" at the journal's `crash_at`-th
/// write, then resumes it from what the journal kept, as the redelivery
/// would, and runs it to its end.
async fn killed_and_resumed(env: &Env, job: &StepJob, crash_at: usize) -> (Progress, Checkpoint) {
    let journal = Crashing::new(crash_at);
    let mut cp = Checkpoint::default();
    let fx = Effects {
        hardware: &env.registry,
        clock: &SystemClock,
        gate: &Ungated,
        images: &flow_executor::images::OriginUnverified,
        journal: &journal,
        observer: &flow_executor::Unobserved,
        cancelled: &|| false,
        listening: &env.listening,
    };
    loop {
        tokio::select! {
            progress = advance(job, &mut cp, &fx) => match progress {
                Progress::WaitUntil(t) => {
                    let left = t.saturating_sub(SystemClock.now_ms());
                    tokio::time::sleep(Duration::from_millis(left)).await;
                }
                other => panic!("ended before the kill: {other:?}"),
            },
            () = journal.crashed.notified() => break,
        }
    }
    // The redelivery: from the bucket, through JSON.
    let kept = journal.kept.lock().unwrap().clone().unwrap_or_default();
    let mut cp: Checkpoint = serde_json::from_slice(&serde_json::to_vec(&kept).unwrap()).unwrap();
    let memory = MemoryJournal::default();
    // Another worker: nothing it heard before the kill.
    let listening = flow_executor::wake::Listening::default();
    let fx = Effects {
        journal: &memory,
        observer: &flow_executor::Unobserved,
        listening: &listening,
        ..fx
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match advance(job, &mut cp, &fx).await {
            Progress::WaitUntil(t) => {
                assert!(Instant::now() < deadline, "never finished");
                let left = t.saturating_sub(SystemClock.now_ms());
                tokio::time::sleep(Duration::from_millis(left)).await;
            }
            other => return (other, cp),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_resumed_after_a_kill_resends_only_what_its_record_does_not_say_was_sent() {
    let env = Env::scaled(InitialPower::On, 4, 0.05).await;
    // Two trays at a time: writes 1 and 2 record and confirm the first
    // two trays' commands, 3 and 4 the last two's.
    let off = rule(
        json!([{"component_type": "compute", "stage": 1, "max_parallel": 2,
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "10s", "poll_interval": "50ms",
                            "parameters": {"expected_status": "off"}}]}]),
    );
    let job = env.job(&off, 0, "power_off");

    // Killed as the last two's record is written (write 3): their
    // commands were never sent; the first two's are confirmed.
    let (progress, cp) = killed_and_resumed(&env, &job, 3).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    for tray in trays(&env) {
        assert_eq!(
            sim_commands(&env, &tray),
            ["GracefulShutdown"],
            "{tray}: sent once"
        );
        assert_eq!(sim_power(&env, &tray), "Off");
    }

    // Killed after the first two's commands went and before their
    // confirmation (write 2 lost): a power-off twice is harmless, so the
    // redelivery decides again from the state — the trays are moving,
    // then off — and sends nothing more.
    env.sim.shutdown().await;
    let env = Env::scaled(InitialPower::On, 4, 0.05).await;
    let job = env.job(&off, 0, "power_off");
    let (progress, cp) = killed_and_resumed(&env, &job, 2).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    for tray in trays(&env) {
        assert_eq!(sim_commands(&env, &tray), ["GracefulShutdown"], "{tray}");
    }
    assert_eq!(cp.results["compute-01"], "Off");

    // The same kill during a restart: a second restart is not harmless,
    // so the redelivery does not send one; the step fails saying why.
    let restart = rule(
        json!([{"component_type": "compute", "stage": 1, "max_parallel": 2,
        "main_operation": {"name": "PowerControl"}}]),
    );
    env.sim.shutdown().await;
    let env = Env::scaled(InitialPower::On, 4, 0.05).await;
    let job = env.job(&restart, 0, "force_restart");
    let (progress, _) = killed_and_resumed(&env, &job, 2).await;
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert!(
        f.message
            .contains("force_restart may have reached the device already"),
        "{f}"
    );
    for tray in ["compute-01", "compute-02"] {
        assert_eq!(sim_commands(&env, tray), ["ForceRestart"], "{tray}: once");
    }
    for tray in ["compute-03", "compute-04"] {
        assert!(sim_commands(&env, tray).is_empty(), "{tray}: never started");
    }
    env.sim.shutdown().await;
}
