//! Hardware events and their executions against a real Postgres: an
//! identity is stored once, due executions are handed out once across
//! claimers (`SKIP LOCKED`), an attempt's outcome is recorded only under
//! its claim, a lease that runs out hands the execution to another
//! claimer without counting the interrupted attempt, and a retry is due
//! again only after its delay.

use std::time::Duration;

use flow_protocol::event::{ExecutionStatus, HardwareEvent};
use flow_store::Store;
use flow_store::events::{AttemptOutcome, NewExecution};
use flow_tests::TestDb;
use serde_json::json;

async fn store() -> (Store, TestDb) {
    let db = TestDb::create().await;
    let store = Store::connect(db.url(), 4).await.unwrap();
    store.migrate().await.unwrap();
    (store, db)
}

fn event(key: &str) -> HardwareEvent {
    serde_json::from_value(json!({"source": "test", "key": key,
        "event_type": "hardware.leak.detected", "severity": "critical", "rack": "rack-01",
        "component": "compute-01", "observed_at": "2026-12-01T00:00:00Z"}))
    .unwrap()
}

fn noop() -> NewExecution {
    NewExecution {
        action: serde_json::from_value(json!({"name": "act", "do": {"kind": "noop"}})).unwrap(),
        status: ExecutionStatus::Pending,
        reason: String::new(),
        targets: vec!["rack-01/compute-01".to_owned()],
    }
}

const LEASE: Duration = Duration::from_secs(30);

/// Waits (bounded) until an execution is due and claims it.
async fn until_claimed(store: &Store) -> Vec<flow_store::events::ClaimedExecution> {
    flow_tests::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let c = store.claim_executions(10, LEASE).await.unwrap();
            (!c.is_empty()).then_some(c)
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_identity_is_stored_once_with_its_executions() {
    let (store, _db) = store().await;
    let (id, created) = store
        .insert_event(&event("k"), "r", &[noop()])
        .await
        .unwrap();
    assert!(created);
    let (again, created) = store
        .insert_event(&event("k"), "r", &[noop(), noop()])
        .await
        .unwrap();
    assert_eq!((again, created), (id, false));
    assert_eq!(store.get_event(id).await.unwrap().executions.len(), 1);
}

#[tokio::test]
async fn claims_are_exclusive_fenced_and_retries_wait_their_delay() {
    let (store, _db) = store().await;
    store
        .insert_event(&event("k"), "r", &[noop()])
        .await
        .unwrap();
    let held = store.claim_executions(10, LEASE).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].attempt, 1);
    // Held: nobody else gets it.
    assert!(store.claim_executions(10, LEASE).await.unwrap().is_empty());
    let retry = AttemptOutcome::Retry {
        after: Duration::from_millis(300),
        error: "refused".to_owned(),
    };
    assert!(store.finish_execution(&held[0], &retry, &[]).await.unwrap());
    // Not due before its delay; due after it, as attempt 2.
    assert!(store.claim_executions(10, LEASE).await.unwrap().is_empty());
    let second = until_claimed(&store).await;
    assert_eq!(second[0].attempt, 2);
    // The first claim no longer records anything.
    assert!(
        !store
            .finish_execution(&held[0], &AttemptOutcome::Completed, &[])
            .await
            .unwrap()
    );
    let failed = AttemptOutcome::Failed {
        error: "for good".to_owned(),
    };
    assert!(
        store
            .finish_execution(&second[0], &failed, &[])
            .await
            .unwrap()
    );
    let record = store.get_event(second[0].event_id).await.unwrap();
    let x = &record.executions[0];
    assert_eq!(
        (x.status, x.attempts, x.last_error.as_str()),
        (ExecutionStatus::Failed, 2, "for good")
    );
    assert!(store.claim_executions(10, LEASE).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_lapsed_lease_hands_the_execution_over_without_counting_the_attempt() {
    let (store, _db) = store().await;
    store
        .insert_event(&event("k"), "r", &[noop()])
        .await
        .unwrap();
    let short = Duration::from_millis(200);
    let first = store.claim_executions(10, short).await.unwrap();
    assert_eq!(first[0].attempt, 1);
    // Its holder dies: after the lease another claimer takes it over.
    let taken = until_claimed(&store).await;
    assert_eq!(
        taken[0].attempt, 1,
        "the interrupted attempt is not counted"
    );
    assert!(
        !store
            .finish_execution(&first[0], &AttemptOutcome::Completed, &[])
            .await
            .unwrap()
    );
    let task = flow_protocol::TaskId::new();
    assert!(
        store
            .finish_execution(&taken[0], &AttemptOutcome::Completed, &[task])
            .await
            .unwrap()
    );
    let record = store.get_event(taken[0].event_id).await.unwrap();
    assert_eq!(record.executions[0].status, ExecutionStatus::Completed);
    assert_eq!(record.executions[0].tasks, [task]);
}

#[tokio::test]
async fn the_schema_accepts_exactly_the_execution_statuses_and_event_types_the_enums_name() {
    let (store, _db) = store().await;
    let (id, _) = store
        .insert_event(&event("k"), "r", &[noop()])
        .await
        .unwrap();
    let set = |status: String| {
        let store = store.clone();
        async move {
            sqlx::query("UPDATE event_executions SET status = $2 WHERE event_id = $1")
                .bind(id.as_uuid())
                .bind(status)
                .execute(store.pool())
                .await
        }
    };
    for s in ExecutionStatus::ALL {
        set(s.as_str().to_owned())
            .await
            .unwrap_or_else(|e| panic!("execution status {s}: {e}"));
    }
    assert!(set("deferred".into()).await.is_err());
    for t in flow_protocol::event::EventType::ALL {
        let spec = serde_json::from_value(
            json!({"name": format!("rule {t}"), "event_type": t.as_str(),
            "actions": [{"name": "act", "do": {"kind": "noop"}}]}),
        )
        .unwrap();
        store
            .insert_event_rule(&spec, false)
            .await
            .unwrap_or_else(|e| panic!("{t}: {e}"));
    }
}
