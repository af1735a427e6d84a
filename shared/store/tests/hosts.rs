//! A database URL with several hosts against the real Postgres: a dead
//! host is passed over, a read-only one refused for read-write, and when
//! the current host goes away (a TCP hop in front of the server, closed)
//! the store moves to the next one by itself.

use std::time::Duration;

use flow_store::Store;
use flow_tests::{TestDb, url_host_port};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The test database's URL with its `host:port` replaced by `hosts`.
fn with_hosts(db: &TestDb, hosts: &str) -> String {
    let (host, port) = url_host_port(db.url(), 5432).unwrap();
    db.url().replacen(&format!("{host}:{port}"), hosts, 1)
}

fn real(db: &TestDb) -> String {
    let (host, port) = url_host_port(db.url(), 5432).unwrap();
    format!("{host}:{port}")
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A TCP hop to the real server: a host of its own that can be cut off.
struct Hop {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Hop {
    async fn start(to: String) -> Hop {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = to.clone();
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Hop { port, task }
    }

    /// Closes the listener and every connection through it.
    async fn cut(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn one(store: &Store) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT 1").fetch_one(store.pool()).await
}

#[tokio::test]
async fn a_dead_first_host_is_passed_over() {
    let db = TestDb::create().await;
    let url = with_hosts(&db, &format!("127.0.0.1:{},{}", dead_port(), real(&db)))
        + "?target_session_attrs=read-write";
    let store = Store::connect(&url, 2).await.expect("the second host");
    assert_eq!(one(&store).await.unwrap(), 1);
}

#[tokio::test]
async fn a_read_only_server_is_refused_for_read_write() {
    let db = TestDb::create().await;
    let admin = Store::connect(db.url(), 1).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" SET default_transaction_read_only = on",
        db.name()
    )))
    .execute(admin.pool())
    .await
    .unwrap();
    admin.pool().close().await;
    let hosts = format!("127.0.0.1:{},{}", dead_port(), real(&db));
    let err = Store::connect(
        &(with_hosts(&db, &hosts) + "?target_session_attrs=read-write"),
        1,
    )
    .await
    .expect_err("a read-only server is no primary");
    let text = err.to_string();
    assert!(
        text.starts_with("no database host answers and accepts writes:"),
        "{text}"
    );
    assert!(
        text.contains("cannot connect"),
        "the dead host named: {text}"
    );
    assert!(
        text.contains("read-only"),
        "the read-only host named: {text}"
    );
    // Any session will do: the same list connects.
    let store = Store::connect(&(with_hosts(&db, &hosts) + "?target_session_attrs=any"), 1)
        .await
        .expect("any host that answers");
    assert_eq!(one(&store).await.unwrap(), 1);
}

#[tokio::test]
async fn when_the_current_host_goes_away_the_store_moves_to_the_next() {
    let db = TestDb::create().await;
    let hop = Hop::start(real(&db)).await;
    let url = with_hosts(&db, &format!("127.0.0.1:{},{}", hop.port, real(&db)))
        + "?target_session_attrs=read-write";
    let store = Store::connect(&url, 2).await.unwrap();
    assert_eq!(
        store.pool().connect_options().get_port(),
        hop.port,
        "the first host first"
    );
    assert_eq!(one(&store).await.unwrap(), 1);
    hop.cut().await;
    let (_, real_port) = url_host_port(db.url(), 5432).unwrap();
    let moved = flow_tests::eventually(
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async { (store.pool().connect_options().get_port() == real_port).then_some(()) },
    )
    .await;
    assert!(
        moved.is_ok(),
        "the store never left the host that went away"
    );
    let answered = flow_tests::eventually(
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async { one(&store).await.ok() },
    )
    .await;
    assert_eq!(answered.ok(), Some(1), "queries work on the next host");
}
