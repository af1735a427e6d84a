//! The step executor on tokio's paused clock with a scripted manager: the
//! retry policy's delays to the millisecond, call timeouts, verification
//! polls and their deadline, `max_parallel` in virtual time, error classes
//! recorded as such, and a run resumed from a serialised checkpoint at every
//! wait ending exactly where an uninterrupted one does. Nothing here sleeps
//! in real time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flow_executor::gate::Ungated;
use flow_executor::{Checkpoint, Clock, Progress, StepJob, advance};
use flow_hardware::catalog::BMC_CAPABILITIES;
use flow_hardware::{
    ComponentManager, ComponentTarget, HardwareError, ManagerDescriptor, ManagerRegistry,
    PowerOutcome, PowerStatus,
};
use flow_rules::{ComponentType, OperationCode, PowerOperation, RuleDefinition};
use serde_json::json;

/// Epoch milliseconds on tokio's clock: a fixed start plus the (paused,
/// auto-advancing) time elapsed since the clock was made.
struct TokioClock {
    base_ms: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    fn new() -> Self {
        TokioClock {
            base_ms: 1_700_000_000_000,
            start: tokio::time::Instant::now(),
        }
    }

    fn instant(&self, ms: u64) -> tokio::time::Instant {
        self.start + Duration::from_millis(ms.saturating_sub(self.base_ms))
    }

    fn elapsed_ms(&self) -> u64 {
        self.now_ms() - self.base_ms
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.base_ms + u64::try_from(self.start.elapsed().as_millis()).unwrap()
    }
}

/// What a scripted component answers, call after call (the last answer
/// repeats).
#[derive(Clone)]
enum Answer {
    Ok,
    Transient,
    Permanent,
    Hang,
}

/// A manager whose answers are scripted per component, with a call latency
/// in virtual time; it records when each call was made and the peak of
/// concurrent calls.
struct Scripted {
    descriptor: ManagerDescriptor,
    latency: Duration,
    /// Power control answers by component.
    control: Mutex<BTreeMap<String, Vec<Answer>>>,
    /// Power status answers by component (`true` = On).
    status: Mutex<BTreeMap<String, Vec<bool>>>,
    /// Components whose status calls fail (unreachable).
    silent: Mutex<Vec<String>>,
    clock_start: tokio::time::Instant,
    calls: Mutex<Vec<(String, &'static str, u64)>>,
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Scripted {
    fn new(latency: Duration) -> Self {
        Scripted {
            descriptor: ManagerDescriptor {
                component_type: ComponentType::Compute,
                name: "scripted",
                capabilities: BMC_CAPABILITIES.to_vec(),
            },
            latency,
            control: Mutex::default(),
            status: Mutex::default(),
            silent: Mutex::default(),
            clock_start: tokio::time::Instant::now(),
            calls: Mutex::default(),
            now: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    fn control(self, name: &str, answers: Vec<Answer>) -> Self {
        self.control.lock().unwrap().insert(name.into(), answers);
        self
    }

    fn status(self, name: &str, answers: Vec<bool>) -> Self {
        self.status.lock().unwrap().insert(name.into(), answers);
        self
    }

    fn silent(self, name: &str) -> Self {
        self.silent.lock().unwrap().push(name.into());
        self
    }

    fn next<T: Clone>(map: &Mutex<BTreeMap<String, Vec<T>>>, name: &str, default: T) -> T {
        let mut map = map.lock().unwrap();
        match map.get_mut(name) {
            Some(list) if list.len() > 1 => list.remove(0),
            Some(list) => list.first().cloned().unwrap_or(default),
            None => default,
        }
    }

    async fn enter(&self, target: &ComponentTarget, what: &'static str) {
        let at = u64::try_from(self.clock_start.elapsed().as_millis()).unwrap();
        self.calls
            .lock()
            .unwrap()
            .push((target.name.clone(), what, at));
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    /// When each call of `what` to `name` was made (ms since the start).
    fn times(&self, name: &str, what: &str) -> Vec<u64> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, w, _)| n == name && *w == what)
            .map(|(_, _, at)| *at)
            .collect()
    }
}

fn unreachable(target: &ComponentTarget) -> HardwareError {
    HardwareError::Unreachable {
        component: target.name.clone(),
        url: target.bmc_url.clone(),
        detail: "connection refused".into(),
    }
}

#[async_trait]
impl ComponentManager for Scripted {
    fn descriptor(&self) -> &ManagerDescriptor {
        &self.descriptor
    }

    async fn power_control(
        &self,
        target: &ComponentTarget,
        _operation: PowerOperation,
    ) -> Result<PowerOutcome, HardwareError> {
        let answer = Self::next(&self.control, &target.name, Answer::Ok);
        if matches!(answer, Answer::Hang) {
            self.calls
                .lock()
                .unwrap()
                .push((target.name.clone(), "control", 0));
            std::future::pending::<()>().await;
        }
        self.enter(target, "control").await;
        match answer {
            Answer::Ok | Answer::Hang => Ok(PowerOutcome::Issued {
                reset_type: "On".into(),
            }),
            Answer::Transient => Err(unreachable(target)),
            Answer::Permanent => Err(HardwareError::Http {
                component: target.name.clone(),
                action: "reset".into(),
                status: 400,
                message: "bad request".into(),
            }),
        }
    }

    async fn power_status(&self, target: &ComponentTarget) -> Result<PowerStatus, HardwareError> {
        self.enter(target, "status").await;
        if self.silent.lock().unwrap().contains(&target.name) {
            return Err(unreachable(target));
        }
        Ok(if Self::next(&self.status, &target.name, true) {
            PowerStatus::On
        } else {
            PowerStatus::Off
        })
    }
}

fn targets(n: usize) -> Vec<ComponentTarget> {
    (1..=n)
        .map(|i| ComponentTarget {
            rack: "rack-01".into(),
            name: format!("compute-{i:02}"),
            component_type: ComponentType::Compute,
            bmc_url: format!("http://127.0.0.1:{}", 9000 + i),
            credential_ref: "sim".into(),
            resource_id: None,
        })
        .collect()
}

fn job(step: serde_json::Value, n: usize) -> StepJob {
    let rule = RuleDefinition::from_value(&json!({"version": "v1", "steps": [step]})).unwrap();
    let components = targets(n);
    StepJob {
        operation: "power_on".parse::<OperationCode>().unwrap(),
        step: rule.steps[0].clone(),
        all_components: [(ComponentType::Compute, components.clone())].into(),
        components,
        firmware: BTreeMap::new(),
        power_domains: Vec::new(),
        emergency: false,
    }
}

fn registry(manager: Arc<Scripted>) -> ManagerRegistry {
    let mut r = ManagerRegistry::new();
    r.register(manager);
    r
}

/// Runs the step to its end on the paused clock, sleeping (virtually) until
/// every wait it returns; with `resume`, the checkpoint goes through JSON at
/// every wait, as a worker's would.
async fn drive(
    job: &StepJob,
    registry: &ManagerRegistry,
    clock: &TokioClock,
    resume: bool,
) -> (Progress, Checkpoint) {
    let mut cp = Checkpoint::default();
    loop {
        match advance(job, &mut cp, registry, clock, &Ungated, &|| false).await {
            Progress::WaitUntil(at) => {
                assert!(at > clock.now_ms(), "a wait in the past: {at}");
                tokio::time::sleep_until(clock.instant(at)).await;
                if resume {
                    cp = serde_json::from_slice(&serde_json::to_vec(&cp).unwrap()).unwrap();
                }
            }
            other => return (other, cp),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn transient_errors_wait_exactly_the_policys_backoff_and_then_fail_with_the_attempts() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(100))
            .control(
                "compute-01",
                vec![Answer::Transient, Answer::Transient, Answer::Ok],
            )
            .control("compute-02", vec![Answer::Transient]),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1,
        "retry": {"max_attempts": 3, "initial_interval": "1s", "backoff_coefficient": 2.0},
        "main_operation": {"name": "PowerControl"}});
    let (progress, cp) = drive(&job(step, 2), &registry, &clock, false).await;
    // compute-01: calls at 0, after 100 ms + 1 s, after that + 100 ms + 2 s.
    assert_eq!(manager.times("compute-01", "control"), [0, 1_100, 3_200]);
    // compute-02 fails after its third attempt, with every attempt counted.
    assert_eq!(manager.times("compute-02", "control"), [0, 1_100, 3_200]);
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(f.action, "main_operation (PowerControl)");
    assert_eq!(
        f.message,
        "compute-02 failed: transient: compute-02: cannot reach http://127.0.0.1:9002: connection refused (after 3 attempts)"
    );
    assert_eq!(cp.components["compute-02"].attempts, 3);
    assert_eq!(cp.calls, 6);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_not_retried_and_keeps_its_class() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(10)).control("compute-01", vec![Answer::Permanent]),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}});
    let (progress, _) = drive(&job(step, 1), &registry, &clock, false).await;
    assert_eq!(manager.times("compute-01", "control"), [0]);
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(
        f.message,
        "compute-01 failed: permanent: compute-01: reset answered HTTP 400: bad request"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_never_answers_is_cut_at_its_timeout_and_retried() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(10))
            .control("compute-01", vec![Answer::Hang, Answer::Ok]),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl", "timeout": "30s"}});
    let (progress, cp) = drive(&job(step, 1), &registry, &clock, false).await;
    assert_eq!(progress, Progress::Done);
    // Cut at 30 s, retried 1 s later (the default policy), answered.
    assert_eq!(
        manager.times("compute-01", "control"),
        [0, 31_000],
        "the hung call and its retry"
    );
    assert_eq!(
        cp.components["compute-01"].last_error.as_deref(),
        Some("transient: no answer within 30s")
    );
}

#[tokio::test(start_paused = true)]
async fn verification_polls_at_its_interval_and_fails_at_its_timeout() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(50))
            .status("compute-01", vec![false, false, true])
            .status("compute-02", vec![false]),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1,
        "main_operation": {"name": "VerifyPowerStatus", "timeout": "10s", "poll_interval": "2s",
                           "parameters": {"expected_status": "on"}}});
    let (progress, _) = drive(&job(step, 2), &registry, &clock, false).await;
    // Polls 2 s after each answer (50 ms each).
    assert_eq!(manager.times("compute-01", "status"), [0, 2_050, 4_100]);
    let polls = manager.times("compute-02", "status");
    assert!(polls.len() >= 5, "{polls:?}");
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(
        f.message,
        "compute-02 failed: still Off after 10s waiting for On"
    );
    // It gave up at its deadline (10 s after the action began), not later
    // than the last poll's answer time past it.
    assert!(
        (10_000..=10_000 + 2_100).contains(&clock.elapsed_ms()),
        "{}",
        clock.elapsed_ms()
    );
}

#[tokio::test(start_paused = true)]
async fn max_parallel_bounds_calls_in_flight_in_virtual_time() {
    let manager = Arc::new(Scripted::new(Duration::from_secs(1)));
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1, "max_parallel": 2,
        "main_operation": {"name": "PowerControl"}});
    let (progress, _) = drive(&job(step, 5), &registry, &clock, false).await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(manager.peak.load(Ordering::SeqCst), 2);
    // Five one-second calls two at a time: three rounds.
    assert_eq!(clock.elapsed_ms(), 3_000);
}

#[tokio::test(start_paused = true)]
async fn a_run_resumed_from_its_checkpoint_at_every_wait_ends_as_an_uninterrupted_one() {
    let step = json!({"component_type": "compute", "stage": 1, "max_parallel": 1,
        "pre_operation": [{"name": "Sleep", "parameters": {"duration": "5s"}}],
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "3s",
                            "parameters": {"expected_status": "on"}}]});
    let mut outcomes = Vec::new();
    for resume in [false, true] {
        let manager = Arc::new(
            Scripted::new(Duration::from_millis(200))
                .control("compute-02", vec![Answer::Transient, Answer::Ok])
                .status("compute-01", vec![false, true]),
        );
        let registry = registry(Arc::clone(&manager));
        let clock = TokioClock::new();
        let (progress, cp) = drive(&job(step.clone(), 2), &registry, &clock, resume).await;
        let calls: Vec<_> = manager.calls.lock().unwrap().clone();
        outcomes.push((progress, cp.calls, cp.results, calls, clock.elapsed_ms()));
    }
    assert_eq!(outcomes[0].0, Progress::Done);
    assert_eq!(outcomes[0], outcomes[1], "resumed at every wait");
}

#[tokio::test(start_paused = true)]
async fn reachability_that_needs_every_component_names_the_ones_that_never_answered() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(20))
            .silent("compute-02")
            .silent("compute-03"),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1,
        "pre_operation": [{"name": "VerifyReachability", "timeout": "6s", "poll_interval": "2s",
            "parameters": {"component_types": ["compute"], "require_all": true}}],
        "main_operation": {"name": "PowerControl"}});
    let (progress, _) = drive(&job(step, 3), &registry, &clock, true).await;
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(
        f.message,
        "Compute still unreachable after 6s (every component must answer); no answer from compute-02, compute-03"
    );
    assert!(
        manager.times("compute-01", "control").is_empty(),
        "nothing commanded"
    );
}

#[tokio::test(start_paused = true)]
async fn a_component_that_waited_for_a_max_parallel_slot_gets_the_whole_verification_timeout() {
    // Each tray reads On at its third poll, 2.1 s after its first; the
    // timeout is 3 s; one tray at a time.
    let mut manager = Scripted::new(Duration::from_millis(50));
    for i in 1..=3 {
        manager = manager.status(&format!("compute-{i:02}"), vec![false, false, true]);
    }
    let manager = Arc::new(manager);
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1, "max_parallel": 1,
        "main_operation": {"name": "VerifyPowerStatus", "timeout": "3s", "poll_interval": "1s",
                           "parameters": {"expected_status": "on"}}});
    let (progress, _) = drive(&job(step, 3), &registry, &clock, false).await;
    assert_eq!(progress, Progress::Done);
    // The third tray started after the first two were done, and was still
    // given its 3 s.
    let third = manager.times("compute-03", "status");
    assert_eq!(third.len(), 3, "{third:?}");
    assert!(third[0] >= 4_000, "{third:?}");
}

/// A power gate that holds every command until `open_ms` (epoch ms on the
/// test's clock), then grants; or refuses everything.
struct Gate {
    open_ms: u64,
    refuse: bool,
    /// Answer a reservation at `open_ms` (sendable for 1 s) instead of
    /// "ask again".
    reserve: bool,
    asked: AtomicUsize,
    clock: Arc<TokioClock>,
}

impl flow_executor::gate::PowerGate for Gate {
    fn admit<'a>(
        &'a self,
        _job: &'a StepJob,
        _request: flow_executor::gate::GateRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<flow_protocol::power::Admission, String>> {
        use flow_protocol::power::Admission;
        self.asked.fetch_add(1, Ordering::SeqCst);
        let answer = if self.refuse {
            Admission::Refused {
                reason: "power budget of row=B is 10 kW, below its steady draw".into(),
            }
        } else if self.reserve && self.clock.now_ms() < self.open_ms {
            Admission::Reserved {
                at_ms: self.open_ms,
                send_by_ms: self.open_ms + 1_000,
                reason: "waiting for power budget in row=B: 1,180 of 1,200 kW".into(),
            }
        } else if self.clock.now_ms() < self.open_ms {
            Admission::Wait {
                until_ms: self.open_ms,
                reason: "waiting for power budget in row=B: 1,180 of 1,200 kW".into(),
            }
        } else {
            Admission::Granted
        };
        Box::pin(async move { Ok(answer) })
    }
}

fn gated_job(n: usize) -> StepJob {
    let mut job = job(
        json!({"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}),
        n,
    );
    job.power_domains = vec!["row=B".parse().unwrap()];
    job
}

#[tokio::test(start_paused = true)]
async fn a_held_command_waits_in_the_checkpoint_with_its_reason_and_is_sent_when_admitted() {
    let manager = Arc::new(Scripted::new(Duration::from_millis(10)));
    let registry = registry(Arc::clone(&manager));
    let clock = Arc::new(TokioClock::new());
    let gate = Gate {
        open_ms: clock.now_ms() + 2_000,
        refuse: false,
        reserve: false,
        asked: AtomicUsize::new(0),
        clock: Arc::clone(&clock),
    };
    let job = gated_job(2);
    let mut cp = Checkpoint::default();
    let Progress::WaitUntil(at) =
        advance(&job, &mut cp, &registry, &*clock, &gate, &|| false).await
    else {
        panic!("not held")
    };
    assert_eq!(at, gate.open_ms, "the wait ends when admission said");
    for c in ["compute-01", "compute-02"] {
        assert_eq!(
            cp.components[c].held.as_deref(),
            Some("waiting for power budget in row=B: 1,180 of 1,200 kW")
        );
        assert_eq!(cp.components[c].attempts, 0, "a hold is no attempt");
    }
    assert_eq!(cp.calls, 0, "nothing was sent while held");
    assert!(manager.times("compute-01", "control").is_empty());
    // Resumed from JSON, as another worker would.
    let mut cp: Checkpoint = serde_json::from_slice(&serde_json::to_vec(&cp).unwrap()).unwrap();
    tokio::time::sleep_until(clock.instant(at)).await;
    let progress = advance(&job, &mut cp, &registry, &*clock, &gate, &|| false).await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(manager.times("compute-01", "control"), [2_000]);
    assert_eq!(manager.times("compute-02", "control"), [2_000]);
    assert!(cp.components.values().all(|c| c.held.is_none()));
    assert_eq!(cp.calls, 2);
    assert_eq!(gate.asked.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn a_reserved_command_goes_at_its_time_without_asking_again_and_asks_anew_when_late() {
    for late in [false, true] {
        let manager = Arc::new(Scripted::new(Duration::from_millis(10)));
        let registry = registry(Arc::clone(&manager));
        let clock = Arc::new(TokioClock::new());
        let start = clock.now_ms();
        let gate = Gate {
            open_ms: start + 2_000,
            refuse: false,
            reserve: true,
            asked: AtomicUsize::new(0),
            clock: Arc::clone(&clock),
        };
        let job = gated_job(2);
        let mut cp = Checkpoint::default();
        let Progress::WaitUntil(at) =
            advance(&job, &mut cp, &registry, &*clock, &gate, &|| false).await
        else {
            panic!("not held")
        };
        assert_eq!(at, gate.open_ms);
        assert_eq!(gate.asked.load(Ordering::SeqCst), 2);
        assert_eq!(cp.calls, 0, "nothing was sent before the reservation");
        // Resumed from JSON, as another worker would: the reservation
        // travels in the checkpoint.
        let mut cp: Checkpoint = serde_json::from_slice(&serde_json::to_vec(&cp).unwrap()).unwrap();
        // Late: past the reservation's last moment (1 s after its start).
        let resume = if late { at + 1_500 } else { at };
        tokio::time::sleep_until(clock.instant(resume)).await;
        let progress = advance(&job, &mut cp, &registry, &*clock, &gate, &|| false).await;
        assert_eq!(progress, Progress::Done);
        let sent = resume - start;
        assert_eq!(manager.times("compute-01", "control"), [sent]);
        assert_eq!(manager.times("compute-02", "control"), [sent]);
        assert!(
            cp.components
                .values()
                .all(|c| c.held.is_none() && c.send_by_ms.is_none())
        );
        // On time: asked once each. Late: the lapsed reservation covered
        // nothing, so each asked again (and was granted: the gate opened).
        let asked = if late { 4 } else { 2 };
        assert_eq!(gate.asked.load(Ordering::SeqCst), asked, "late: {late}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_command_fails_its_component_naming_the_reason_and_racks_in_no_domain_never_ask()
{
    let manager = Arc::new(Scripted::new(Duration::from_millis(10)));
    let registry = registry(Arc::clone(&manager));
    let clock = Arc::new(TokioClock::new());
    let gate = Gate {
        open_ms: 0,
        refuse: true,
        reserve: false,
        asked: AtomicUsize::new(0),
        clock: Arc::clone(&clock),
    };
    let mut cp = Checkpoint::default();
    let progress = advance(&gated_job(1), &mut cp, &registry, &*clock, &gate, &|| false).await;
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert!(
        f.message
            .contains("power admission refused: power budget of row=B is 10 kW"),
        "{}",
        f.message
    );
    assert!(manager.times("compute-01", "control").is_empty());
    // The same step of a rack in no domain: the gate is not asked.
    let mut job = gated_job(1);
    job.power_domains.clear();
    let mut cp = Checkpoint::default();
    let asked = gate.asked.load(Ordering::SeqCst);
    let progress = advance(&job, &mut cp, &registry, &*clock, &gate, &|| false).await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(gate.asked.load(Ordering::SeqCst), asked);
}
