//! Flow on a 3-node JetStream cluster: streams and the bucket replicated
//! on every node (R3), two schedulers and two workers each connected to
//! another node first, and a node lost under a running task.

use std::time::Duration;

use async_nats::jetstream;
use flow_protocol::jobs::{BUCKET_JOB_STATE, CONSUMER_WORKERS, STREAM_JOBS, STREAM_RESULTS};
use flow_protocol::partition::{BUCKET_WORKERS, Partition};
use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::{POLL, Stack};
use serde_json::{Value, json};

fn rule(expected: &str) -> Value {
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                        "parameters": {"expected_status": expected}});
    let (first, last) = if expected == "on" {
        ("powershelf", "compute")
    } else {
        ("compute", "powershelf")
    };
    json!({"version": "v1", "steps": [
        {"component_type": first, "stage": 1, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": last, "stage": 3, "max_parallel": 2,
         "pre_operation": [{"name": "Sleep", "parameters": {"duration": "1s"}}],
         "main_operation": {"name": "PowerControl"}, "post_operation": [verify]}
    ]})
}

/// Reset commands the simulator accepted per component, so far.
fn commands(stack: &Stack) -> Vec<(String, usize)> {
    stack.sim().state().racks[0]
        .components
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.command_count(flow_rack_sim::CommandKind::Reset),
            )
        })
        .collect()
}

/// The replicas JetStream reports for a stream: its leader and followers.
async fn replicas(js: &jetstream::Context, stream: &str) -> usize {
    let mut s = js.get_stream(stream).await.expect("the stream");
    let info = s.info().await.expect("its info");
    info.cluster
        .as_ref()
        .map_or(0, |c| usize::from(c.leader.is_some()) + c.replicas.len())
}

/// Waits (bounded) until `done` holds for the task. A request in flight
/// when a node dies is lost, and one made while every scheduler is
/// reconnecting finds no responder: each such try counts as "not yet", as
/// an operator would try again.
async fn until(
    stack: &Stack,
    task: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let body = serde_json::to_vec(&json!({ "id": task })).unwrap();
    let last = std::sync::Mutex::new(String::new());
    flow_tests::eventually(timeout, POLL, || async {
        let reply = stack
            .api
            .request_raw("task.get", body.clone(), Duration::from_secs(2), None)
            .await;
        let task = match reply {
            Ok(m) => flow_protocol::api::decode_reply::<Value>(&m).ok(),
            Err(e) => {
                *last.lock().unwrap() = e.to_string();
                None
            }
        }?;
        *last.lock().unwrap() = task.to_string();
        done(&task).then_some(task)
    })
    .await
    .unwrap_or_else(|e| panic!("{what}: {e}; last: {}", last.lock().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_complete_while_the_node_leading_the_jobs_is_killed() {
    let mut stack = Stack::builder()
        .cluster(3)
        .job_ack_wait(Duration::from_secs(5))
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::Off,
            compute: 4,
            nvswitch: 2,
            powershelf: 2,
            ..SimConfig::default()
        })
        .workers(2)
        .start()
        .await;
    stack.start_scheduler().await;
    for stream in [
        STREAM_JOBS,
        STREAM_RESULTS,
        &format!("KV_{BUCKET_JOB_STATE}"),
        &format!("KV_{BUCKET_WORKERS}"),
    ] {
        let mut s = stack.js.get_stream(stream).await.unwrap();
        assert_eq!(s.info().await.unwrap().config.num_replicas, 3, "{stream}");
        assert_eq!(
            replicas(&stack.js, stream).await,
            3,
            "{stream} on every node"
        );
    }
    let last_partition = Partition::all().last().unwrap().consumer();
    for name in [CONSUMER_WORKERS, &last_partition] {
        let mut consumer = stack
            .js
            .get_consumer_from_stream::<jetstream::consumer::pull::Config, _, _>(name, STREAM_JOBS)
            .await
            .unwrap();
        let info = consumer.info().await.unwrap();
        let followers = info.cluster.as_ref().map_or(0, |c| c.replicas.len());
        assert_eq!(
            followers, 2,
            "the workers' consumer {name} is replicated too: {info:?}"
        );
    }

    for (code, expected) in [("power_on", "on"), ("power_off", "off")] {
        stack
            .ok(
                "rule.create",
                json!({"name": code, "operation_type": "power_control", "operation": code,
                       "definition": rule(expected), "is_default": true}),
            )
            .await;
    }
    let mut before = commands(&stack);
    for (phase, (code, expected)) in [("power_on", "On"), ("power_off", "Off")]
        .into_iter()
        .enumerate()
    {
        let reply = stack
            .ok(
                "task.submit",
                json!({"request_id": format!("cluster-{code}"), "racks": ["rack-01"], "operation": code}),
            )
            .await;
        let task = reply["results"][0]["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{code} not accepted: {reply}"))
            .to_owned();
        // Mid-run: once the second stage has started, kill the node that
        // leads the jobs (in the second phase: the results).
        stack
            .until_task(
                &task,
                "stage 2 never started",
                Duration::from_secs(30),
                |t| t["steps"][1]["status"] != "pending",
            )
            .await;
        let stream = if phase == 0 {
            STREAM_JOBS
        } else {
            STREAM_RESULTS
        };
        let leader = stack.stream_leader(stream).await.expect("a leader");
        let node = stack
            .node_named(&leader)
            .expect("the leader is one of ours");
        eprintln!(
            "{:?}: killing {leader} (leads {stream})",
            std::time::SystemTime::now()
        );
        tokio::task::block_in_place(|| stack.node(node).kill());
        let t = until(
            &stack,
            &task,
            "the task never finished",
            Duration::from_secs(90),
            |t| !["pending", "queued", "running"].contains(&t["status"].as_str().unwrap_or("")),
        )
        .await;
        assert_eq!(
            t["status"], "completed",
            "{code} after {stream}'s leader was killed: {t:#}"
        );
        let now = commands(&stack);
        for ((name, after), (_, was)) in now.iter().zip(&before) {
            let n = after - was;
            assert!(
                (1..=2).contains(&n),
                "{code}: {name} was commanded {n} times (once, or twice when a call in flight was redelivered)"
            );
        }
        let state = stack.sim().state();
        for c in &state.racks[0].components {
            assert_eq!(
                serde_json::to_value(c.power_state).unwrap(),
                expected,
                "{code}: {}",
                c.name
            );
        }
        before = now;
        // The node comes back and catches up; the stream has three
        // replicas again.
        eprintln!("{:?}: restarting {leader}", std::time::SystemTime::now());
        tokio::task::block_in_place(|| stack.node(node).start_again());
        eprintln!("{:?}: restarted {leader}", std::time::SystemTime::now());
        let js = stack.js.clone();
        flow_tests::eventually(Duration::from_secs(30), POLL, || {
            let js = js.clone();
            async move {
                let mut s = js.get_stream(stream).await.ok()?;
                let info = s.info().await.ok()?;
                let c = info.cluster.as_ref()?;
                (c.replicas.len() == 2 && c.replicas.iter().all(|r| r.current)).then_some(())
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{stream}: the restarted node never caught up: {e}"));
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_one_replica_is_raised_to_three_at_start_up() {
    let mut stack = Stack::builder()
        .cluster(3)
        .without_scheduler()
        .start()
        .await;
    // An installation that began on R1.
    stack
        .js
        .create_stream(jetstream::stream::Config {
            name: STREAM_JOBS.to_owned(),
            subjects: vec!["flow.jobs.>".to_owned()],
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    stack
        .js
        .publish("flow.jobs.compute", "kept".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(replicas(&stack.js, STREAM_JOBS).await, 1);
    stack.start_scheduler().await;
    // While the update moves the stream onto three nodes, a read of it may
    // find no leader for a moment (StreamNotFound): wait until it answers.
    let js = stack.js.clone();
    let info = flow_tests::eventually(Duration::from_secs(30), POLL, || {
        let js = js.clone();
        async move {
            let mut s = js.get_stream(STREAM_JOBS).await.ok()?;
            s.info().await.ok().cloned()
        }
    })
    .await
    .expect("FLOW_JOBS readable after the update");
    assert_eq!(info.config.num_replicas, 3);
    assert_eq!(
        info.state.messages, 1,
        "the update kept the stream's messages"
    );
    let js = stack.js.clone();
    flow_tests::eventually(Duration::from_secs(30), POLL, || {
        let js = js.clone();
        async move { (replicas(&js, STREAM_JOBS).await == 3).then_some(()) }
    })
    .await
    .expect("FLOW_JOBS on three nodes");
    stack.stop().await;
}

/// Starts a scheduler with `topology`; its error if it does not start.
async fn start(
    stack: &Stack,
    topology: flow_scheduler::Topology,
) -> Result<(), flow_scheduler::SchedulerError> {
    let scheduler =
        flow_scheduler::Scheduler::start_with(stack.client.clone(), stack.store.clone(), topology)
            .await?;
    scheduler.stop().await
}

#[tokio::test]
async fn three_replicas_on_a_single_server_is_refused_naming_the_stream() {
    let mut stack = Stack::builder().without_scheduler().start().await;
    let r3 = flow_scheduler::Topology {
        replicas: 3,
        ..stack.topology()
    };
    // Nothing yet: the first stream cannot be created.
    let err = start(&stack, r3.clone())
        .await
        .expect_err("R3 on one server cannot be");
    let chain = flow_telemetry::ErrorChain(&err).to_string();
    assert!(
        chain.contains("cannot create or read stream FLOW_TASKS"),
        "{chain}"
    );
    assert!(
        chain.contains("replicas > 1 not supported in non-clustered mode"),
        "{chain}"
    );
    // Streams made with R1: the update to R3 is refused, naming both counts.
    stack.start_scheduler().await;
    let err = start(&stack, r3)
        .await
        .expect_err("no update to R3 on one server");
    let chain = flow_telemetry::ErrorChain(&err).to_string();
    assert!(
        chain.contains(
            "stream FLOW_TASKS has 1 replica(s), 3 wanted (FLOW_JETSTREAM_REPLICAS), and JetStream refused the update"
        ),
        "{chain}"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_tags_no_server_carries_are_refused_naming_the_stream() {
    let stack = Stack::builder()
        .cluster(3)
        .without_scheduler()
        .start()
        .await;
    let topology = flow_scheduler::Topology {
        placement_tags: vec!["rack-room-9".to_owned()],
        ..stack.topology()
    };
    let err = start(&stack, topology)
        .await
        .expect_err("no server carries the tag");
    let chain = flow_telemetry::ErrorChain(&err).to_string();
    assert!(
        chain.contains("cannot create or read stream FLOW_TASKS"),
        "{chain}"
    );
    assert!(chain.contains("no suitable peers for placement"), "{chain}");
    stack.stop().await;
}
