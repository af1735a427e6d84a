//! The PostgreSQL that `scripts/test` provides is reachable.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use flow_tests::{DATABASE_URL_ENV, database_url, url_host_port};

const TIMEOUT: Duration = Duration::from_secs(5);

#[test]
fn database_url_names_a_postgres_server_that_accepts_connections() {
    let url = database_url();
    assert!(
        url.starts_with("postgres://") || url.starts_with("postgresql://"),
        "{DATABASE_URL_ENV}={url} is not a postgres:// URL"
    );
    let (host, port) =
        url_host_port(&url, 5432).unwrap_or_else(|e| panic!("{DATABASE_URL_ENV}: {e}"));

    let addrs: Vec<_> = (host.as_str(), port)
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("{DATABASE_URL_ENV}: cannot resolve {host}: {e}"))
        .collect();
    let mut last_error = None;
    let mut stream = addrs
        .iter()
        .find_map(|addr| {
            TcpStream::connect_timeout(addr, TIMEOUT)
                .map_err(|e| last_error = Some(format!("{addr}: {e}")))
                .ok()
        })
        .unwrap_or_else(|| {
            panic!("{DATABASE_URL_ENV}={url}: no connection to {host}:{port} ({last_error:?})")
        });
    stream
        .set_read_timeout(Some(TIMEOUT))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(TIMEOUT))
        .expect("write timeout");

    // Check it really is PostgreSQL: an SSLRequest (length 8, code 80877103)
    // is answered with a single 'S' or 'N' byte by every PostgreSQL server.
    let mut request = Vec::with_capacity(8);
    request.extend_from_slice(&8_i32.to_be_bytes());
    request.extend_from_slice(&80_877_103_i32.to_be_bytes());
    stream.write_all(&request).expect("send SSLRequest");
    let mut answer = [0_u8; 1];
    stream
        .read_exact(&mut answer)
        .unwrap_or_else(|e| panic!("{host}:{port} did not answer an SSLRequest: {e}"));
    assert!(
        matches!(answer[0], b'S' | b'N'),
        "{host}:{port} answered {:?} to an SSLRequest: not PostgreSQL",
        answer[0] as char
    );
}

#[tokio::test]
async fn each_test_database_is_fresh_and_dropped_afterwards() {
    use sqlx::Connection;
    let db = flow_tests::TestDb::create().await;
    let name = db.name().to_owned();
    let mut conn = sqlx::PgConnection::connect(db.url())
        .await
        .expect("connect");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("count tables");
    assert_eq!(tables, 0);
    drop(conn);
    drop(db);
    let mut admin = sqlx::PgConnection::connect(&flow_tests::database_url())
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(left, 0, "{name} was not dropped");
}

#[test]
fn with_database_replaces_only_the_path() {
    assert_eq!(
        flow_tests::with_database("postgres://u@h:5432/postgres?sslmode=disable", "x"),
        "postgres://u@h:5432/x?sslmode=disable"
    );
    assert_eq!(
        flow_tests::with_database("postgres://u@h", "x"),
        "postgres://u@h/x"
    );
}
