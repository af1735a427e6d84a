//! Verified identity against a real nats-server running the shipped
//! `deploy/nats/flow-verified.conf` (only its store directory changed, and
//! one test-only user added inside the FLOW account where a case needs
//! it), a fresh Postgres database and a scheduler in `--identity verified`:
//!
//! * an operator's forged `Flow-Actor` and forged `Nats-Request-Info`
//!   (sent twice) are recorded as the user the server authenticated, the
//!   `Flow-Actor` kept as a claim; a copy in another letter case is refused
//!   and recorded as that same user;
//! * an operator may not call the internal endpoints (`forbidden`);
//! * a request from inside the scheduler's account without a stamp may
//!   read but not change anything (`unauthenticated`, recorded as refused);
//! * a viewer's change is refused by the server and reaches nobody;
//! * a task request on the `flow.tasks.submit` stream is answered with a
//!   refusal and creates nothing; an operator has no route to it at all;
//! * the access policy: a viewer's power-on is refused and audited as
//!   refused; an operator scoped to `row=A` powers on a row-A rack and is
//!   refused on a row-B rack through the API (named or by label), the
//!   preview, the CLI, a run and a schedule — the last when it fires after
//!   her scope shrank;
//! * through the console: the console's service user, trusted as an
//!   intermediary (`--intermediary CONSOLE/console`), acts for the user it
//!   names in `Flow-On-Behalf-Of` — as `CONSOLE/<user>`, under that user's
//!   grants, audited with both — while an operator naming another user is
//!   refused and audited as herself.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use flow_protocol::access::{AccessGrant, Role};
use flow_protocol::api::{ApiError, ErrorCode, decode_reply};
use flow_protocol::jobs::SUBJECT_SUBMIT;
use flow_protocol::subjects::api_subject;
use flow_scheduler::{IdentityMode, Scheduler, Topology};
use flow_store::Store;
use flow_tests::{NatsServer, TestDb};
use futures::StreamExt;
use serde_json::{Value, json};

/// The shipped file, read from the repository.
const CONFIG: &str = include_str!("../../../deploy/nats/flow-verified.conf");
/// The one line the tests must change in it: where JetStream keeps files.
const STORE_DIR_LINE: &str = "store_dir: \"/var/lib/nats\"";
/// The FLOW account's worker line, after which a test may add a user.
const WORKER_LINE: &str =
    "{user: worker, password: $FLOW_NATS_WORKER_PASSWORD, permissions: $ROLE_WORKER}";
/// Bound of one request.
const REPLY: Duration = Duration::from_secs(10);

/// A site in verified mode: the server, the database, the scheduler.
struct Site {
    nats: NatsServer,
    db: TestDb,
    scheduler: Scheduler,
}

const PASSWORDS: [(&str, &str); 6] = [
    ("FLOW_NATS_SCHEDULER_PASSWORD", "scheduler-secret"),
    ("FLOW_NATS_WORKER_PASSWORD", "worker-secret"),
    ("FLOW_NATS_ALICE_PASSWORD", "alice-secret"),
    ("FLOW_NATS_VICTOR_PASSWORD", "victor-secret"),
    ("FLOW_NATS_INTRUDER_PASSWORD", "intruder-secret"),
    ("FLOW_NATS_CONSOLE_PASSWORD", "console-secret"),
];

impl Site {
    /// Starts the server from the shipped file (with `intruder`, a
    /// test-only user of the FLOW account allowed every subject, when
    /// asked), then a verified scheduler connected as `scheduler`, with an
    /// admin grant for each of `admins` (as `flow-scheduler --admin`).
    async fn start(with_intruder: bool, admins: &[&str]) -> Site {
        assert!(
            CONFIG.contains(STORE_DIR_LINE) && CONFIG.contains(WORKER_LINE),
            "deploy/nats/flow-verified.conf no longer has {STORE_DIR_LINE} and {WORKER_LINE}"
        );
        let nats = NatsServer::start_with_config_file(
            &|store| {
                let mut text = CONFIG.replace(
                    STORE_DIR_LINE,
                    &format!("store_dir: \"{}\"", store.display()),
                );
                if with_intruder {
                    text = text.replace(
                        WORKER_LINE,
                        &format!(
                            "{WORKER_LINE}\n      {{user: intruder, password: $FLOW_NATS_INTRUDER_PASSWORD}}"
                        ),
                    );
                }
                text
            },
            &PASSWORDS,
        );
        let db = TestDb::create().await;
        let store = Store::connect(db.url(), 5).await.expect("store connects");
        store.migrate().await.expect("migrations");
        let admins: Vec<String> = admins.iter().map(|a| (*a).to_owned()).collect();
        store.ensure_admins(&admins).await.expect("admins granted");
        let client = connect(&nats, "scheduler", "_INBOX_scheduler").await;
        let scheduler = Scheduler::start_with_options(
            client,
            store,
            flow_scheduler::Options {
                identity: IdentityMode::Verified,
                intermediaries: vec!["CONSOLE/console".to_owned()],
                ..flow_scheduler::Options::new(Topology::single(Duration::from_secs(30)))
            },
        )
        .await
        .expect("a verified scheduler starts on this nats-server");
        Site {
            nats,
            db,
            scheduler,
        }
    }

    async fn store(&self) -> Store {
        Store::connect(self.db.url(), 2).await.expect("store")
    }

    async fn stop(self) {
        self.scheduler.stop().await.expect("scheduler stops");
        drop(self.nats);
    }
}

/// A connection as `user` (password from [`PASSWORDS`]) with its own
/// inbox prefix.
async fn connect(nats: &NatsServer, user: &str, inbox: &str) -> async_nats::Client {
    let variable = format!("FLOW_NATS_{}_PASSWORD", user.to_uppercase());
    let password = PASSWORDS
        .iter()
        .find(|(k, _)| *k == variable)
        .map(|(_, v)| *v)
        .expect("a password");
    async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        .custom_inbox_prefix(inbox)
        .connect(nats.url())
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"))
}

/// Sends `body` to `endpoint` with exactly these headers (repeats kept).
async fn request(
    client: &async_nats::Client,
    endpoint: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Result<Value, ApiError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(*name, *value);
    }
    let reply = tokio::time::timeout(
        REPLY,
        client.request_with_headers(api_subject(endpoint), map, body.to_string().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("{endpoint}: no reply within {REPLY:?}"))
    .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
    decode_reply::<Value>(&reply.payload)
}

/// The newest audit record.
async fn newest(store: &Store) -> Value {
    let records: Vec<Value> = sqlx::query_scalar(
        "SELECT to_jsonb(a) - 'request' FROM audit_log a ORDER BY id DESC LIMIT 1",
    )
    .fetch_all(store.pool())
    .await
    .expect("audit read");
    records.into_iter().next().expect("an audit record")
}

/// Rows in one of the tables the tests count.
#[derive(Clone, Copy)]
enum Table {
    Audit,
    Racks,
    Tasks,
}

async fn count(store: &Store, table: Table) -> i64 {
    let sql = match table {
        Table::Audit => "SELECT count(*) FROM audit_log",
        Table::Racks => "SELECT count(*) FROM racks",
        Table::Tasks => "SELECT count(*) FROM tasks",
    };
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .expect("count")
}

fn rack(name: &str) -> Value {
    json!({"rack": {"name": name, "components": [
        {"name": "compute-01", "type": "compute", "bmc_url": "http://127.0.0.1:9"}
    ]}})
}

const FORGED: &str = r#"{"acc":"FLOW","user":"root"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_identities_are_recorded_as_the_user_the_server_verified() {
    let site = Site::start(false, &["OPS/alice"]).await;
    let store = site.store().await;
    let alice = connect(&site.nats, "alice", "_INBOX_alice").await;

    // Forged Flow-Actor and a forged stamp, twice: the server writes its
    // own over both.
    request(
        &alice,
        "rack.create",
        &rack("rack-a1"),
        &[
            ("Flow-Actor", "root"),
            ("Nats-Request-Info", FORGED),
            ("Nats-Request-Info", FORGED),
        ],
    )
    .await
    .expect("alice creates a rack");
    let r = newest(&store).await;
    assert_eq!(
        (
            &r["endpoint"],
            &r["actor"],
            &r["actor_source"],
            &r["claimed_actor"],
            &r["outcome"]
        ),
        (
            &json!("rack.create"),
            &json!("OPS/alice"),
            &json!("verified"),
            &json!("root"),
            &json!("ok")
        ),
        "{r}"
    );

    // A copy in another letter case survives the server (it matches names
    // exactly): the scheduler refuses the request and records who sent it.
    let error = request(
        &alice,
        "rack.create",
        &rack("rack-a2"),
        &[("Flow-Actor", "root"), ("nats-request-info", FORGED)],
    )
    .await
    .expect_err("a lower-case stamp is refused");
    assert_eq!(error.code, ErrorCode::Unauthenticated, "{error:?}");
    assert!(error.message.contains("nats-request-info"), "{error:?}");
    let r = newest(&store).await;
    assert_eq!(
        (&r["actor"], &r["claimed_actor"], &r["outcome"]),
        (&json!("OPS/alice"), &json!("root"), &json!("refused")),
        "{r}"
    );
    assert_eq!(
        count(&store, Table::Racks).await,
        1,
        "rack-a2 was not created"
    );

    // An operator is no process of Flow's: the internal endpoints refuse.
    let error = request(
        &alice,
        "power.sent",
        &json!({"grant": "00000000-0000-0000-0000-000000000000"}),
        &[],
    )
    .await
    .expect_err("an operator may not report power sends");
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");

    // Reads answer, and list the verified actor.
    let listed = request(&alice, "audit.list", &json!({"actor": "OPS/alice"}), &[])
        .await
        .expect("alice reads the log");
    assert_eq!(listed["records"].as_array().map(Vec::len), Some(2));

    // A viewer's change never reaches the scheduler: the server refuses it.
    // (Flow's policy makes him a viewer too, so that his reads answer.)
    grant(&store, "OPS/victor", Role::Viewer, &[], &[]).await;
    let victor = connect(&site.nats, "victor", "_INBOX_victor").await;
    let before = count(&store, Table::Audit).await;
    let refused = tokio::time::timeout(
        Duration::from_secs(3),
        victor.request(
            api_subject("rack.create"),
            rack("rack-v").to_string().into(),
        ),
    )
    .await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "the server let a viewer's rack.create through"
    );
    request(&victor, "rack.list", &json!({}), &[])
        .await
        .expect("a viewer reads");
    assert_eq!(count(&store, Table::Audit).await, before);
    assert_eq!(count(&store, Table::Racks).await, 1);

    // An operator has no route to the submission stream.
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(alice.clone());
    let acked = match js
        .publish(
            SUBJECT_SUBMIT,
            json!({"request_id": "alice-stream", "racks": ["rack-a1"], "operation": "power_on"})
                .to_string()
                .into(),
        )
        .await
    {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    };
    assert!(!acked, "JetStream took an operator's stream submission");
    assert_eq!(count(&store, Table::Tasks).await, 0);
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstamped_requests_from_inside_flows_account_may_read_but_not_change() {
    let site = Site::start(true, &[]).await;
    let store = site.store().await;
    let intruder = connect(&site.nats, "intruder", "_INBOX_intruder").await;

    let error = request(
        &intruder,
        "rack.create",
        &rack("rack-i1"),
        &[("Flow-Actor", "alice")],
    )
    .await
    .expect_err("an unstamped change is refused");
    assert_eq!(error.code, ErrorCode::Unauthenticated, "{error:?}");
    let r = newest(&store).await;
    assert_eq!(
        (
            &r["actor"],
            &r["actor_source"],
            &r["claimed_actor"],
            &r["outcome"]
        ),
        (
            &json!("unknown"),
            &json!("unverified"),
            &json!("alice"),
            &json!("refused")
        ),
        "{r}"
    );
    assert_eq!(count(&store, Table::Racks).await, 0);
    request(&intruder, "rack.list", &json!({}), &[])
        .await
        .expect("an unstamped read answers");

    // A stream submission keeps no stamp: refused, answered, nothing made.
    let mut outcomes = intruder
        .subscribe("flow.events.submit.from-inside")
        .await
        .expect("subscribe");
    let js = jetstream::new(intruder.clone());
    js.publish(
        SUBJECT_SUBMIT,
        json!({"request_id": "from-inside", "racks": ["rack-i1"], "operation": "power_on"})
            .to_string()
            .into(),
    )
    .await
    .expect("published")
    .await
    .expect("stored");
    let outcome = tokio::time::timeout(REPLY, outcomes.next())
        .await
        .expect("an outcome within the bound")
        .expect("a message");
    let error = decode_reply::<Value>(&outcome.payload).expect_err("refused");
    assert_eq!(error.code, ErrorCode::Unauthenticated, "{error:?}");
    assert!(error.message.contains("flow.api"), "{error:?}");
    assert_eq!(count(&store, Table::Tasks).await, 0);

    // The limit the file's comments state: inside FLOW a stamp can be
    // written by hand, which is why FLOW holds only Flow's processes. It
    // is believed — and judged by OPS/bob's grants, of which there are
    // none.
    let error = request(
        &intruder,
        "rack.create",
        &rack("rack-i2"),
        &[("Nats-Request-Info", r#"{"acc":"OPS","user":"bob"}"#)],
    )
    .await
    .expect_err("OPS/bob holds no grant");
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");
    let r = newest(&store).await;
    assert_eq!(
        (&r["actor"], &r["actor_source"], &r["outcome"]),
        (&json!("OPS/bob"), &json!("verified"), &json!("refused")),
        "{r}"
    );
    site.stop().await;
}

/// A submission's conflict strategy here: wait behind the rack's task.
static QUEUE: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"strategy": "queue", "timeout_seconds": 600}));

/// A rack in `row` (labelled `site=east` too), one compute tray.
fn rack_in(name: &str, row: &str) -> Value {
    json!({"rack": {"name": name, "labels": {"row": row, "site": "east"}, "components": [
        {"name": "compute-01", "type": "compute", "bmc_url": "http://127.0.0.1:9"}
    ]}})
}

/// The grant of `role` given straight in the policy (as an admin's `flow
/// access grant` would), returning its number.
async fn grant(
    store: &Store,
    subject: &str,
    role: Role,
    labels: &[(&str, &str)],
    racks: &[&str],
) -> i64 {
    store
        .grant_access(&AccessGrant {
            subject: subject.into(),
            role,
            racks: racks.iter().map(|r| (*r).to_owned()).collect(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        })
        .await
        .expect("granted")
        .id
}

/// Runs the `flow` CLI as `user` against the site; its exit code and output.
fn cli(site: &Site, user: &str, args: &[&str]) -> (i32, String) {
    let variable = format!("FLOW_NATS_{}_PASSWORD", user.to_uppercase());
    let password = PASSWORDS.iter().find(|(k, _)| *k == variable).unwrap().1;
    let out = std::process::Command::new(flow_tests::workspace_binary("flow", "services/cli"))
        .args(args)
        .env("FLOW_NATS_URL", site.nats.url())
        .env("FLOW_NATS_USER", user)
        .env("FLOW_NATS_PASSWORD", password)
        .env("FLOW_NATS_INBOX_PREFIX", format!("_INBOX_{user}"))
        .output()
        .expect("flow runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// What a schedule's newest firing decided for its one rack, once done.
async fn fired(alice: &async_nats::Client, schedule: &str) -> Value {
    flow_tests::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let h = request(
                alice,
                "schedule.history",
                &json!({"schedule": schedule}),
                &[],
            )
            .await
            .ok()?;
            let f = h["firings"].as_array()?.first()?.clone();
            (f["done"] == true).then(|| f["results"][0].clone())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{schedule} never fired: {e}"))
}

/// A once-schedule of a power-on of `rack`, `in_ms` from now.
fn once(name: &str, rack: &str, in_ms: i64) -> Value {
    let at = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(in_ms);
    json!({"name": name, "overlap": "queue",
           "spec": {"kind": "once", "at": at.format(&time::format_description::well_known::Rfc3339).unwrap()},
           "task": {"racks": [rack], "operation": "power_on", "conflict": *QUEUE}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_and_rack_scopes_hold_through_the_api_the_cli_a_run_and_a_schedule() {
    let site = Site::start(false, &["OPS/alice"]).await;
    let store = site.store().await;
    let alice = connect(&site.nats, "alice", "_INBOX_alice").await;
    // As the site's admin at first: racks in rows A and B and a rule.
    for (name, row) in [("rack-a", "A"), ("rack-b", "B")] {
        request(&alice, "rack.create", &rack_in(name, row), &[])
            .await
            .expect("the admin creates racks");
    }
    request(
        &alice,
        "rule.create",
        &json!({"name": "on", "operation_type": "power_control", "operation": "power_on",
                "is_default": true, "definition": {"version": "v1", "steps": [
                    {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}}),
        &[],
    )
    .await
    .expect("the admin creates a rule");
    // Then only a viewer: her admin grant revoked.
    let admin = store.access_grants(Some("OPS/alice")).await.unwrap()[0].id;
    store.revoke_access(admin).await.expect("revoked");
    grant(&store, "OPS/alice", Role::Viewer, &[], &[]).await;

    // A viewer reads, and her power-on is refused and audited as refused.
    request(&alice, "rack.list", &json!({}), &[])
        .await
        .expect("a viewer reads");
    // Each task waits behind the rack's last (no worker runs them).
    let submit = |racks: Value, id: &str| json!({"request_id": id, "racks": racks, "operation": "power_on", "conflict": *QUEUE});
    let error = request(&alice, "task.submit", &submit(json!(["rack-a"]), "v1"), &[])
        .await
        .expect_err("a viewer may not power on");
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");
    assert!(
        error
            .message
            .contains("it needs operator, and OPS/alice has viewer on every rack"),
        "{error:?}"
    );
    let r = newest(&store).await;
    assert_eq!(
        (&r["endpoint"], &r["actor"], &r["outcome"]),
        (
            &json!("task.submit"),
            &json!("OPS/alice"),
            &json!("refused")
        ),
        "{r}"
    );
    assert_eq!(count(&store, Table::Tasks).await, 0);

    // An operator over row A: rack-a yes, rack-b no — named, or selected
    // by a label.
    let row_a = grant(&store, "OPS/alice", Role::Operator, &[("row", "A")], &[]).await;
    let ok = request(&alice, "task.submit", &submit(json!(["rack-a"]), "a1"), &[])
        .await
        .expect("rack-a is in her scope");
    assert!(ok["results"][0]["task_id"].is_string(), "{ok}");
    let error = request(&alice, "task.submit", &submit(json!(["rack-b"]), "b1"), &[])
        .await
        .expect_err("rack-b is not");
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");
    assert!(
        error.message.contains(
            "on rack-b: it is outside OPS/alice's operator scope (operator on racks labelled row=A"
        ),
        "{error:?}"
    );
    let by_label = request(
        &alice,
        "task.submit",
        &json!({"request_id": "east", "labels": {"site": "east"}, "operation": "power_on",
                "conflict": *QUEUE}),
        &[],
    )
    .await
    .expect("answered per rack");
    let results = by_label["results"].as_array().unwrap();
    let of = |rack: &str| results.iter().find(|r| r["rack"] == rack).unwrap().clone();
    assert!(of("rack-a")["task_id"].is_string(), "{by_label}");
    assert_eq!(of("rack-b")["error"]["code"], "forbidden", "{by_label}");
    // The preview says the same before anything is made.
    let plan = request(
        &alice,
        "task.plan",
        &json!({"request_id": "p", "labels": {"site": "east"}, "operation": "power_on"}),
        &[],
    )
    .await
    .expect("a preview");
    assert!(
        plan.to_string()
            .contains("outside OPS/alice's operator scope"),
        "{plan}"
    );

    // Through the CLI, as alice.
    let (code, text) = cli(&site, "alice", &["power", "on", "--rack", "rack-b"]);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("outside OPS/alice's operator scope"),
        "{text}"
    );
    let (code, text) = cli(
        &site,
        "alice",
        &[
            "access",
            "check",
            "OPS/alice",
            "task.submit",
            "--rack",
            "rack-a",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("allowed: let by grant {row_a}")),
        "{text}"
    );
    let (code, text) = cli(
        &site,
        "alice",
        &["access", "grant", "OPS/alice", "--role", "admin"],
    );
    assert_ne!(code, 0, "an operator may not grant herself more: {text}");
    assert!(text.contains("it needs admin"), "{text}");

    // A run acts with its creator's scope, target by target.
    for (run, row) in [("run-a", "A"), ("run-b", "B")] {
        request(
            &alice,
            "run.create",
            &json!({"name": run, "task": {"labels": {"row": row}, "operation": "power_on",
                                           "conflict": *QUEUE},
                    "phases": {"equal": 1}, "max_concurrent": 1,
                    "gates": [{"kind": "failure_count", "count": 5}]}),
            &[],
        )
        .await
        .expect("a run is created");
    }
    let target = |run: &'static str| {
        let alice = alice.clone();
        async move {
            flow_tests::eventually(
                Duration::from_secs(20),
                Duration::from_millis(100),
                || async {
                    let t = request(&alice, "run.targets", &json!({"run": run}), &[])
                        .await
                        .ok()?;
                    let t = t["targets"][0].clone();
                    (t["status"] != "pending").then_some(t)
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{run}'s target never moved: {e}"))
        }
    };
    let a = target("run-a").await;
    assert_eq!(a["status"], "submitted", "{a}");
    let b = target("run-b").await;
    assert_eq!(b["status"], "failed", "{b}");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("outside OPS/alice's operator scope"),
        "{b}"
    );

    // A schedule too, checked again when it fires: one fires in scope; one
    // created in scope fires after her scope shrank, and is refused.
    request(
        &alice,
        "schedule.create",
        &once("now-a", "rack-a", 500),
        &[],
    )
    .await
    .expect("a schedule in scope");
    let r = fired(&alice, "now-a").await;
    assert!(r["task_id"].is_string(), "{r}");
    request(
        &alice,
        "schedule.create",
        &once("later-a", "rack-a", 3_000),
        &[],
    )
    .await
    .expect("a schedule in scope when created");
    // Her scope shrinks to rack-b: row A is no longer hers.
    grant(&store, "OPS/alice", Role::Operator, &[], &["rack-b"]).await;
    store
        .revoke_access(row_a)
        .await
        .expect("her row A grant revoked");
    let r = fired(&alice, "later-a").await;
    assert_eq!(r["error"]["code"], "forbidden", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains(
            "on rack-a: it is outside OPS/alice's operator scope (operator on racks rack-b"
        ),
        "{r}"
    );
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_acts_as_its_users_under_their_own_scope() {
    let site = Site::start(false, &["OPS/alice"]).await;
    let store = site.store().await;
    let alice = connect(&site.nats, "alice", "_INBOX_alice").await;
    for (name, row) in [("rack-a", "A"), ("rack-b", "B")] {
        request(&alice, "rack.create", &rack_in(name, row), &[])
            .await
            .expect("the admin creates racks");
    }
    request(
        &alice,
        "rule.create",
        &json!({"name": "on", "operation_type": "power_control", "operation": "power_on",
                "is_default": true, "definition": {"version": "v1", "steps": [
                    {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}}),
        &[],
    )
    .await
    .expect("the admin creates a rule");
    // carol uses the console: an operator over row A. The console itself
    // holds no operator grant at all.
    grant(
        &store,
        "CONSOLE/carol",
        Role::Operator,
        &[("row", "A")],
        &[],
    )
    .await;
    grant(&store, "CONSOLE/console", Role::Viewer, &[], &[]).await;
    // The console calls as it does for a signed-in user
    // (services/console/src/app.rs).
    let console = flow_client::Client::new(
        connect(&site.nats, "console", "_INBOX_console").await,
        site.nats.url(),
    );
    let submit = |rack: &str, id: &str| -> flow_protocol::submit::TaskSubmit {
        serde_json::from_value(
            json!({"request_id": id, "racks": [rack], "operation": "power_on",
                                      "conflict": *QUEUE}),
        )
        .expect("a task request")
    };
    let ok = console
        .call_on_behalf::<flow_protocol::api::endpoint::TaskSubmit>(
            "carol",
            "console:carol",
            &submit("rack-a", "c1"),
        )
        .await
        .expect("rack-a is in carol's scope");
    let ok = serde_json::to_value(&ok).expect("json");
    assert!(ok["results"][0]["task_id"].is_string(), "{ok}");
    let r = newest(&store).await;
    assert_eq!(
        (
            &r["actor"],
            &r["actor_source"],
            &r["via"],
            &r["claimed_actor"],
            &r["outcome"]
        ),
        (
            &json!("CONSOLE/carol"),
            &json!("intermediary"),
            &json!("CONSOLE/console"),
            &json!("console:carol"),
            &json!("ok")
        ),
        "{r}"
    );
    let created_by: Option<String> =
        sqlx::query_scalar("SELECT actor FROM audit_log WHERE endpoint = 'task.submit' LIMIT 1")
            .fetch_one(store.pool())
            .await
            .expect("read");
    assert_eq!(created_by.as_deref(), Some("CONSOLE/carol"));
    let tasks = count(&store, Table::Tasks).await;
    let error = console
        .call_on_behalf::<flow_protocol::api::endpoint::TaskSubmit>(
            "carol",
            "console:carol",
            &submit("rack-b", "c2"),
        )
        .await
        .expect_err("rack-b is outside carol's scope");
    let error = match error {
        flow_client::ClientError::Api(e) => e,
        other => panic!("not an API error: {other:?}"),
    };
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");
    assert!(
        error
            .message
            .contains("on rack-b: it is outside CONSOLE/carol's operator scope"),
        "{error:?}"
    );
    assert_eq!(count(&store, Table::Tasks).await, tasks, "nothing made");
    // Naming no one, the console is itself: a viewer, who may not power on.
    let error = request(
        &console_nats(&site).await,
        "task.submit",
        &json!({"request_id": "c3", "racks": ["rack-a"], "operation": "power_on",
                "conflict": *QUEUE}),
        &[],
    )
    .await
    .expect_err("the console as itself is a viewer");
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");
    let r = newest(&store).await;
    assert_eq!(
        (&r["actor"], &r["actor_source"], &r["via"]),
        (&json!("CONSOLE/console"), &json!("verified"), &Value::Null),
        "{r}"
    );
    // An operator is no intermediary: naming carol is refused, and
    // recorded as herself.
    let error = request(
        &alice,
        "task.submit",
        &json!({"request_id": "a1", "racks": ["rack-a"], "operation": "power_on",
                "conflict": *QUEUE}),
        &[("Flow-On-Behalf-Of", "carol")],
    )
    .await
    .expect_err("alice may not name another user");
    assert_eq!(error.code, ErrorCode::Forbidden, "{error:?}");
    assert!(
        error.message.contains("OPS/alice may not act on behalf"),
        "{error:?}"
    );
    let r = newest(&store).await;
    assert_eq!(
        (&r["actor"], &r["actor_source"], &r["outcome"]),
        (&json!("OPS/alice"), &json!("verified"), &json!("refused")),
        "{r}"
    );
    // And the console may not reach out of its account.
    let error = request(
        &console_nats(&site).await,
        "task.submit",
        &json!({"request_id": "c4", "racks": ["rack-a"], "operation": "power_on",
                "conflict": *QUEUE}),
        &[("Flow-On-Behalf-Of", "OPS/alice")],
    )
    .await
    .expect_err("a name outside the console's account is refused");
    assert_eq!(error.code, ErrorCode::Unauthenticated, "{error:?}");
    assert_eq!(count(&store, Table::Tasks).await, tasks, "nothing made");
    site.stop().await;
}

async fn console_nats(site: &Site) -> async_nats::Client {
    connect(&site.nats, "console", "_INBOX_console").await
}
