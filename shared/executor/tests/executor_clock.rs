//! The step executor on tokio's paused clock with a scripted manager: the
//! retry policy's delays to the millisecond, call timeouts, verification
//! polls and their deadline, `max_parallel` in virtual time, error classes
//! recorded as such, a run resumed from a serialised checkpoint at every
//! wait ending exactly where an uninterrupted one does, and every command
//! recorded before it is sent: held while its record cannot be kept, never
//! repeated where the record says it may have gone and a repeat is not
//! harmless, held while its component is moving. Nothing here sleeps in
//! real time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flow_executor::checkpoint::{Command, Delivery};
use flow_executor::gate::{PowerGate, Ungated};
use flow_executor::{
    Checkpoint, Clock, Effects, Journal, MemoryJournal, Progress, StepJob, advance,
};
use flow_hardware::catalog::BMC_CAPABILITIES;
use flow_hardware::{
    ComponentManager, ComponentTarget, HardwareError, ManagerDescriptor, ManagerRegistry,
    PowerSent, PowerStatus,
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
/// concurrent calls. A component's power is what its last accepted command
/// made it (`Off` at first) unless its status answers are scripted.
struct Scripted {
    descriptor: ManagerDescriptor,
    latency: Duration,
    /// Power control answers by component.
    control: Mutex<BTreeMap<String, Vec<Answer>>>,
    /// Power status answers by component.
    status: Mutex<BTreeMap<String, Vec<PowerStatus>>>,
    /// Power as commanded, by component.
    power: Mutex<BTreeMap<String, PowerStatus>>,
    /// Components whose status calls fail (unreachable).
    silent: Mutex<Vec<String>>,
    /// The journal whose record each command is checked against when it
    /// is sent: the component's command must be recorded (unconfirmed).
    journal: Option<Arc<MemoryJournal>>,
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
            power: Mutex::default(),
            silent: Mutex::default(),
            journal: None,
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
        let answers = answers
            .into_iter()
            .map(|on| {
                if on {
                    PowerStatus::On
                } else {
                    PowerStatus::Off
                }
            })
            .collect();
        self.states(name, answers)
    }

    fn states(self, name: &str, answers: Vec<PowerStatus>) -> Self {
        self.status.lock().unwrap().insert(name.into(), answers);
        self
    }

    fn silent(self, name: &str) -> Self {
        self.silent.lock().unwrap().push(name.into());
        self
    }

    fn journal(mut self, journal: &Arc<MemoryJournal>) -> Self {
        self.journal = Some(Arc::clone(journal));
        self
    }

    fn next<T: Clone>(map: &Mutex<BTreeMap<String, Vec<T>>>, name: &str) -> Option<T> {
        let mut map = map.lock().unwrap();
        match map.get_mut(name) {
            Some(list) if list.len() > 1 => Some(list.remove(0)),
            Some(list) => list.first().cloned(),
            None => None,
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
        operation: PowerOperation,
    ) -> Result<PowerSent, HardwareError> {
        if let Some(journal) = &self.journal {
            let kept = journal
                .last()
                .expect("a record kept before the first command");
            let record = kept.components[&target.name]
                .command
                .clone()
                .expect("the command is recorded before it is sent");
            assert_eq!(record.command, Command::Power(operation));
            assert_eq!(record.delivery, Delivery::Unconfirmed);
        }
        let answer = Self::next(&self.control, &target.name).unwrap_or(Answer::Ok);
        if matches!(answer, Answer::Hang) {
            self.calls
                .lock()
                .unwrap()
                .push((target.name.clone(), "control", 0));
            std::future::pending::<()>().await;
        }
        self.enter(target, "control").await;
        match answer {
            Answer::Ok | Answer::Hang => {
                if let Some(end) = flow_hardware::command::end_state(operation) {
                    self.power.lock().unwrap().insert(target.name.clone(), end);
                }
                Ok(PowerSent {
                    reset_type: "On".into(),
                })
            }
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
        Ok(Self::next(&self.status, &target.name).unwrap_or_else(|| {
            self.power
                .lock()
                .unwrap()
                .get(&target.name)
                .copied()
                .unwrap_or(PowerStatus::Off)
        }))
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

/// What a step acts through here: no cancellation.
fn effects<'a>(
    hardware: &'a ManagerRegistry,
    clock: &'a dyn Clock,
    gate: &'a dyn PowerGate,
    journal: &'a dyn Journal,
) -> Effects<'a> {
    Effects {
        hardware,
        clock,
        gate,
        // The scripted managers fetch nothing: the origin's URL is given.
        images: &flow_executor::images::OriginUnverified,
        journal,
        observer: &flow_executor::Unobserved,
        cancelled: &|| false,
        // The scripted managers follow no events: nothing is ever taken.
        listening: &NOT_LISTENING,
    }
}

static NOT_LISTENING: flow_executor::wake::Listening = flow_executor::wake::Listening::new();

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
    let journal = MemoryJournal::default();
    loop {
        match advance(job, &mut cp, &effects(registry, clock, &Ungated, &journal)).await {
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
    // compute-01: each attempt reads the state (100 ms), then sends; the
    // retries come 1 s, then 2 s, after the failed send's answer.
    assert_eq!(manager.times("compute-01", "status"), [0, 1_200, 3_400]);
    assert_eq!(manager.times("compute-01", "control"), [100, 1_300, 3_500]);
    // compute-02 fails after its third attempt, with every attempt counted.
    assert_eq!(manager.times("compute-02", "control"), [100, 1_300, 3_500]);
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(f.action, "main_operation (PowerControl)");
    assert_eq!(
        f.message,
        "compute-02 failed: transient: compute-02: cannot reach http://127.0.0.1:9002: connection refused (after 3 attempts)"
    );
    assert_eq!(cp.components["compute-02"].attempts, 3);
    // Three reads and three sends each.
    assert_eq!(cp.calls, 12);
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
    assert_eq!(manager.times("compute-01", "control"), [10]);
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
    // Cut at 30 s, retried 1 s later (the default policy: a power-on sent
    // twice is harmless, and the retry reads the state first), answered.
    assert_eq!(
        manager.times("compute-01", "control"),
        [0, 31_020],
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
    // Five components two at a time, each a one-second read and a
    // one-second command: three rounds of two seconds.
    assert_eq!(clock.elapsed_ms(), 6_000);
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
    /// Each ask's released reservation (`replaces_ms`), in order.
    replaced: std::sync::Mutex<Vec<Option<u64>>>,
    clock: Arc<TokioClock>,
}

impl flow_executor::gate::PowerGate for Gate {
    fn admit<'a>(
        &'a self,
        _job: &'a StepJob,
        request: flow_executor::gate::GateRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<flow_protocol::power::Admission, String>> {
        use flow_protocol::power::Admission;
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.replaced.lock().unwrap().push(request.replaces_ms);
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
        replaced: Default::default(),
        clock: Arc::clone(&clock),
    };
    let job = gated_job(2);
    let mut cp = Checkpoint::default();
    let Progress::WaitUntil(at) = advance(
        &job,
        &mut cp,
        &effects(&registry, &*clock, &gate, &MemoryJournal::default()),
    )
    .await
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
    assert_eq!(cp.commands, 0, "nothing was sent while held");
    assert_eq!(cp.calls, 2, "the state was read before asking");
    assert!(manager.times("compute-01", "control").is_empty());
    // Resumed from JSON, as another worker would.
    let mut cp: Checkpoint = serde_json::from_slice(&serde_json::to_vec(&cp).unwrap()).unwrap();
    tokio::time::sleep_until(clock.instant(at)).await;
    let progress = advance(
        &job,
        &mut cp,
        &effects(&registry, &*clock, &gate, &MemoryJournal::default()),
    )
    .await;
    assert_eq!(progress, Progress::Done);
    // Read again (10 ms), admitted, sent.
    assert_eq!(manager.times("compute-01", "control"), [2_010]);
    assert_eq!(manager.times("compute-02", "control"), [2_010]);
    assert!(cp.components.values().all(|c| c.held.is_none()));
    assert_eq!(cp.commands, 2);
    assert_eq!(cp.calls, 6);
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
            replaced: Default::default(),
            clock: Arc::clone(&clock),
        };
        let job = gated_job(2);
        let mut cp = Checkpoint::default();
        let Progress::WaitUntil(at) = advance(
            &job,
            &mut cp,
            &effects(&registry, &*clock, &gate, &MemoryJournal::default()),
        )
        .await
        else {
            panic!("not held")
        };
        assert_eq!(at, gate.open_ms);
        assert_eq!(gate.asked.load(Ordering::SeqCst), 2);
        assert_eq!(cp.commands, 0, "nothing was sent before the reservation");
        // Resumed from JSON, as another worker would: the reservation
        // travels in the checkpoint.
        let mut cp: Checkpoint = serde_json::from_slice(&serde_json::to_vec(&cp).unwrap()).unwrap();
        // Late: past the reservation's last moment (1 s after its start).
        let resume = if late { at + 1_500 } else { at };
        tokio::time::sleep_until(clock.instant(resume)).await;
        let progress = advance(
            &job,
            &mut cp,
            &effects(&registry, &*clock, &gate, &MemoryJournal::default()),
        )
        .await;
        assert_eq!(progress, Progress::Done);
        // On time: sent at once, unread (read when it was reserved). Late:
        // decided anew, the state read (10 ms) first.
        let sent = resume - start + if late { 10 } else { 0 };
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
        // The late asks release the lapsed reservation (its start, as the
        // gate gave it), so it is not counted beside the new grant.
        let replaced = gate.replaced.lock().unwrap().clone();
        let expected = if late {
            vec![None, None, Some(gate.open_ms), Some(gate.open_ms)]
        } else {
            vec![None, None]
        };
        assert_eq!(replaced, expected, "late: {late}");
        assert!(cp.components.values().all(|c| c.reserved_at_ms.is_none()));
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
        replaced: Default::default(),
        clock: Arc::clone(&clock),
    };
    let mut cp = Checkpoint::default();
    let progress = advance(
        &gated_job(1),
        &mut cp,
        &effects(&registry, &*clock, &gate, &MemoryJournal::default()),
    )
    .await;
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
    let progress = advance(
        &job,
        &mut cp,
        &effects(&registry, &*clock, &gate, &MemoryJournal::default()),
    )
    .await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(gate.asked.load(Ordering::SeqCst), asked);
}

/// A journal that refuses its first `refuse` writes, then keeps them all.
#[derive(Default)]
struct Refusing {
    refuse: AtomicUsize,
    kept: MemoryJournal,
}

impl Journal for Refusing {
    fn keep<'a>(&'a self, cp: &'a Checkpoint) -> futures::future::BoxFuture<'a, bool> {
        let left = self.refuse.load(Ordering::SeqCst);
        if left > 0 {
            self.refuse.store(left - 1, Ordering::SeqCst);
            return Box::pin(async { false });
        }
        self.kept.keep(cp)
    }
}

fn power_step(operation: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut step = json!({"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl", "parameters": {"operation": operation}}});
    for (k, v) in extra.as_object().unwrap() {
        step[k] = v.clone();
    }
    step
}

#[tokio::test(start_paused = true)]
async fn every_command_is_recorded_before_it_is_sent_and_confirmed_after() {
    let journal = Arc::new(MemoryJournal::default());
    let manager = Arc::new(Scripted::new(Duration::from_millis(10)).journal(&journal));
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let job = job(power_step("power_on", json!({"max_parallel": 2})), 3);
    let mut cp = Checkpoint::default();
    let progress = advance(
        &job,
        &mut cp,
        &effects(&registry, &clock, &Ungated, &*journal),
    )
    .await;
    assert_eq!(progress, Progress::Done);
    // Two batches (two trays, then one): each recorded, then confirmed.
    assert_eq!(journal.writes(), 4);
    let kept = journal.last().unwrap();
    assert_eq!(
        kept.components, cp.components,
        "the last write is the confirmation"
    );
    for c in ["compute-01", "compute-02", "compute-03"] {
        let record = kept.components[c].command.clone().unwrap();
        assert_eq!(record.command, Command::Power(PowerOperation::PowerOn));
        assert_eq!(record.delivery, Delivery::Accepted, "{c}");
        assert_eq!(kept.results[c], "sent On");
    }
    assert_eq!(cp.commands, 3);
}

#[tokio::test(start_paused = true)]
async fn a_command_whose_record_cannot_be_kept_is_not_sent_until_it_is() {
    let manager = Arc::new(Scripted::new(Duration::from_millis(10)));
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let journal = Refusing {
        refuse: AtomicUsize::new(2),
        ..Refusing::default()
    };
    let job = job(power_step("power_on", json!({})), 1);
    let mut cp = Checkpoint::default();
    let fx = effects(&registry, &clock, &Ungated, &journal);
    let mut progress = advance(&job, &mut cp, &fx).await;
    while let Progress::WaitUntil(at) = progress {
        assert!(
            cp.components["compute-01"].command.is_none(),
            "an unkept record is not left behind"
        );
        tokio::time::sleep_until(clock.instant(at)).await;
        progress = advance(&job, &mut cp, &fx).await;
    }
    assert_eq!(progress, Progress::Done);
    // Read at 0, 1.01 s and 2.02 s; sent only once its record was kept.
    assert_eq!(manager.times("compute-01", "status"), [0, 1_010, 2_020]);
    assert_eq!(manager.times("compute-01", "control"), [2_030]);
    assert_eq!(cp.commands, 1);
}

/// A checkpoint in which `compute-01`'s `command` was recorded and never
/// confirmed: its worker stopped between the send and the confirmation.
fn unconfirmed(op: PowerOperation) -> Checkpoint {
    let mut cp = Checkpoint {
        action_started_ms: Some(1_700_000_000_000),
        ..Checkpoint::default()
    };
    let mut state = flow_executor::checkpoint::ComponentState::pending();
    state.status = flow_executor::checkpoint::ComponentStatus::Active;
    state.command = Some(flow_executor::checkpoint::CommandRecord {
        command: Command::Power(op),
        at_ms: 1_700_000_000_000,
        delivery: Delivery::Unconfirmed,
    });
    cp.components.insert("compute-01".into(), state);
    cp
}

#[tokio::test(start_paused = true)]
async fn a_restart_that_may_have_gone_is_never_repeated_and_a_power_on_decides_again() {
    // A restart: the step fails saying why; nothing is sent.
    let manager = Arc::new(Scripted::new(Duration::from_millis(10)));
    let hardware = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let job_restart = job(power_step("force_restart", json!({})), 1);
    let mut cp = unconfirmed(PowerOperation::ForceRestart);
    let journal = MemoryJournal::default();
    let progress = advance(
        &job_restart,
        &mut cp,
        &effects(&hardware, &clock, &Ungated, &journal),
    )
    .await;
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert!(
        f.message
            .contains("force_restart may have reached the device already")
            && f.message.contains("not sent again"),
        "{}",
        f.message
    );
    assert!(manager.times("compute-01", "control").is_empty());
    assert!(manager.times("compute-01", "status").is_empty());

    // A power-on: harmless twice, so decided again from the state read.
    // Here the first one went: the tray is on, and nothing is sent.
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(10)).states("compute-01", vec![PowerStatus::On]),
    );
    let hardware = registry(Arc::clone(&manager));
    let job_on = job(power_step("power_on", json!({})), 1);
    let mut cp = unconfirmed(PowerOperation::PowerOn);
    let progress = advance(
        &job_on,
        &mut cp,
        &effects(&hardware, &clock, &Ungated, &journal),
    )
    .await;
    assert_eq!(progress, Progress::Done);
    assert!(manager.times("compute-01", "control").is_empty());
    assert_eq!(cp.results["compute-01"], "already On");
    // Here it did not: the tray is off, and the power-on is sent.
    let manager = Arc::new(Scripted::new(Duration::from_millis(10)));
    let hardware = registry(Arc::clone(&manager));
    let mut cp = unconfirmed(PowerOperation::PowerOn);
    let progress = advance(
        &job_on,
        &mut cp,
        &effects(&hardware, &clock, &Ungated, &journal),
    )
    .await;
    assert_eq!(progress, Progress::Done);
    assert_eq!(manager.times("compute-01", "control").len(), 1);
    assert_eq!(cp.results["compute-01"], "sent On");
}

#[tokio::test(start_paused = true)]
async fn a_restart_that_got_no_answer_fails_and_is_not_retried() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(10))
            .states("compute-01", vec![PowerStatus::On])
            .control("compute-01", vec![Answer::Hang, Answer::Ok]),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = power_step(
        "restart",
        json!({"retry": {"max_attempts": 3, "initial_interval": "1s", "backoff_coefficient": 2.0}}),
    );
    let (progress, cp) = drive(&job(step, 1), &registry, &clock, true).await;
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert!(
        f.message.contains("no answer within")
            && f.message.contains("restart may have been carried out"),
        "{}",
        f.message
    );
    assert_eq!(
        manager.times("compute-01", "control").len(),
        1,
        "not retried"
    );
    // The record stays: no later delivery sends it either.
    assert_eq!(
        cp.components["compute-01"]
            .command
            .as_ref()
            .unwrap()
            .delivery,
        Delivery::Unconfirmed
    );
}

#[tokio::test(start_paused = true)]
async fn a_command_waits_for_its_component_to_settle_and_a_forced_power_off_never_does() {
    use PowerStatus::{On, PoweringOff, PoweringOn};
    // A graceful power-off of a tray in the middle of a restart (down,
    // then up): sent once it is On again.
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(10))
            .states("compute-01", vec![PoweringOff, PoweringOn, On]),
    );
    let hardware = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let job_off = job(power_step("power_off", json!({})), 1);
    let mut cp = Checkpoint::default();
    let journal = MemoryJournal::default();
    let fx = effects(&hardware, &clock, &Ungated, &journal);
    let Progress::WaitUntil(at) = advance(&job_off, &mut cp, &fx).await else {
        panic!("not held")
    };
    assert_eq!(
        cp.components["compute-01"].held.as_deref(),
        Some("waiting for PoweringOff to end before sending power_off")
    );
    assert_eq!(cp.components["compute-01"].awaiting, Some(PoweringOff));
    assert_eq!(at - clock.now_ms(), 1_000, "read again a second later");
    let (progress, cp) = {
        let mut progress = Progress::WaitUntil(at);
        while let Progress::WaitUntil(at) = progress {
            tokio::time::sleep_until(clock.instant(at)).await;
            progress = advance(&job_off, &mut cp, &fx).await;
        }
        (progress, cp)
    };
    assert_eq!(progress, Progress::Done);
    assert_eq!(manager.times("compute-01", "status"), [0, 1_010, 2_020]);
    assert_eq!(manager.times("compute-01", "control"), [2_030]);
    assert_eq!(cp.results["compute-01"], "sent On");
    assert!(cp.components["compute-01"].held.is_none());

    // A forced power-off of a tray powering on: sent at once, unread.
    let manager =
        Arc::new(Scripted::new(Duration::from_millis(10)).states("compute-01", vec![PoweringOn]));
    let hardware = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = power_step("force_power_off", json!({}));
    let (progress, _) = drive(&job(step, 1), &hardware, &clock, false).await;
    assert_eq!(progress, Progress::Done);
    assert!(manager.times("compute-01", "status").is_empty());
    assert_eq!(manager.times("compute-01", "control"), [0]);
}

#[tokio::test(start_paused = true)]
async fn a_component_that_never_settles_fails_at_the_actions_timeout_with_nothing_sent() {
    let manager = Arc::new(
        Scripted::new(Duration::from_millis(10))
            .states("compute-01", vec![PowerStatus::PoweringOn]),
    );
    let registry = registry(Arc::clone(&manager));
    let clock = TokioClock::new();
    let step = json!({"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl", "timeout": "3s",
                           "parameters": {"operation": "restart"}}});
    let (progress, _) = drive(&job(step, 1), &registry, &clock, true).await;
    let Progress::Failed(f) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(
        f.message,
        "compute-01 failed: still PoweringOn after 3s: restart not sent (it waits for a steady state)"
    );
    assert!(manager.times("compute-01", "control").is_empty());
    assert!(
        (3_000..=3_100).contains(&clock.elapsed_ms()),
        "{}",
        clock.elapsed_ms()
    );
}
