//! The step executor against the rack simulator over HTTP: stage order with
//! the planner, `max_parallel` honoured, retries with the configured
//! backoff, permanent errors not retried, waits expressed as times to come
//! back, resumption from a serialised checkpoint, cancellation at an action
//! boundary, firmware and decommission.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use flow_decisions::plan;
use flow_executor::gate::Ungated;
use flow_executor::{Checkpoint, Clock, FirmwareImage, Progress, StepJob, SystemClock, advance};
use flow_hardware::{
    ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareStatus, HardwareError, ManagerDescriptor, ManagerRegistry, PowerOutcome,
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
    ) -> Result<PowerOutcome, HardwareError> {
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
}

impl Env {
    async fn new(initial_power: InitialPower, compute: usize) -> Env {
        let sim = flow_rack_sim::start(SimConfig {
            admin_port: 0,
            time_scale: 0.01,
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
        let progress = advance(&job, &mut cp, registry, &clock, &Ungated, cancelled).await;
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
    assert_eq!(
        env.counting[&ComponentType::PowerShelf]
            .calls
            .load(Ordering::SeqCst)
            - before,
        1
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
    let Progress::WaitUntil(until) =
        advance(&job, &mut cp, &env.registry, &clock, &Ungated, &|| false).await
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
    let p = advance(
        &job,
        &mut cp,
        &env.registry,
        &SystemClock,
        &Ungated,
        &cancelled,
    )
    .await;
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
    job.firmware.insert(
        ComponentType::Compute,
        FirmwareImage {
            image_uri: "http://images.local/bmc-26.03.bin".into(),
            version: Some("26.03".into()),
            sub_targets: Vec::new(),
        },
    );
    let (progress, cp, _) = run(&job, &env.registry).await;
    assert_eq!(progress, Progress::Done, "{cp:?}");
    assert_eq!(cp.results["compute-02"], "installed 26.03");
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
