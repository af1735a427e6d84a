//! DSP0266 protocol details every BMC follows: the headers of a GET answer,
//! the `OData-Version` precondition, login through `Sessions/Members`, and
//! refused requests that leave a kept-alive connection usable.

mod common;

use common::*;
use flow_rack_sim::InitialPower;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where the `Link` header points: DMTF's published JSON schemas.
const SCHEMAS: &str = "http://redfish.dmtf.org/schemas/v1";
/// How long a server that waits for the rest of a body stays silent here
/// (an early answer comes at once on loopback).
const NO_ANSWER_YET: std::time::Duration = std::time::Duration::from_millis(300);

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header: {:?}", response.headers()))
        .to_str()
        .expect("ASCII header")
}

#[tokio::test]
async fn get_answers_name_their_methods_cache_policy_and_schema() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    for (path, allow, schema) in [
        ("/redfish/v1/", "GET", "ServiceRoot.v1_15_0.json"),
        (
            "/redfish/v1/SessionService/Sessions",
            "GET, POST",
            "SessionCollection.json",
        ),
        (SYSTEM, "GET", "ComputerSystem.v1_20_0.json"),
        (
            "/redfish/v1/Systems",
            "GET",
            "ComputerSystemCollection.json",
        ),
    ] {
        let response = http
            .get(format!("{base}{path}"))
            .basic_auth(USER, Some(PASSWORD))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(header(&response, "allow"), allow, "{path}");
        assert_eq!(header(&response, "cache-control"), "no-store", "{path}");
        assert_eq!(header(&response, "odata-version"), "4.0", "{path}");
        assert_eq!(
            header(&response, "link"),
            format!("<{SCHEMAS}/{schema}>; rel=describedby"),
            "{path}"
        );
    }
    // Documents without an @odata.type name no schema.
    let response = http
        .get(format!("{base}/redfish/v1/odata"))
        .send()
        .await
        .expect("GET odata");
    assert_eq!(header(&response, "allow"), "GET");
    assert!(response.headers().get("link").is_none());
    // Error answers carry the cache policy too.
    let response = http
        .get(format!("{base}{SYSTEM}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&response, "cache-control"), "no-store");
    sim.shutdown().await;
}

#[tokio::test]
async fn an_unsupported_odata_version_is_a_failed_precondition() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "nvswitch-01");
    let with_version = |version: &'static str| {
        http.get(format!("{base}/redfish/v1/"))
            .header("OData-Version", version)
            .send()
    };
    assert_eq!(
        with_version("4.0").await.expect("GET").status(),
        StatusCode::OK
    );
    let response = with_version("4.1").await.expect("GET");
    assert_eq!(response.status(), StatusCode::PRECONDITION_FAILED);
    let body: Value = response.json().await.expect("error body");
    assert_eq!(message_id(&body), "Base.1.15.0.HeaderInvalid", "{body}");
    assert_eq!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageArgs"],
        json!(["OData-Version: 4.1"])
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_post_to_the_sessions_members_logs_in_too() {
    let mut config = small(InitialPower::On, 0.01);
    config.profiles = vec!["session-only".parse().expect("profile")];
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "powershelf-01");
    let members = format!("{base}/redfish/v1/SessionService/Sessions/Members");
    let response = http
        .post(&members)
        .json(&json!({"UserName": USER, "Password": PASSWORD}))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), StatusCode::CREATED);
    let token = header(&response, "x-auth-token").to_owned();
    let location = header(&response, "location").to_owned();
    assert!(
        location.starts_with("/redfish/v1/SessionService/Sessions/"),
        "{location}"
    );
    let response = http
        .get(format!("{base}{location}"))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .expect("GET session");
    assert_eq!(response.status(), StatusCode::OK);

    let response = http
        .post(&members)
        .json(&json!({"UserName": USER, "Password": "wrong"}))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = http
        .get(&members)
        .header("X-Auth-Token", &token)
        .send()
        .await
        .expect("GET Members");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(header(&response, "allow"), "POST");
    sim.shutdown().await;
}

/// One HTTP/1.1 answer read from `stream`: its status and body.
async fn read_answer(stream: &mut TcpStream) -> (u16, String) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buffer).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .expect("a Content-Length");
            if buffer.len() >= end + 4 + length {
                let status = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("a status line");
                return (status, text[end + 4..end + 4 + length].to_owned());
            }
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(n > 0, "connection closed after {buffer:?}");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A refused POST (`401`) is answered only once its body is read, so the
/// kept-alive connection stays usable (a reply sent while the client is
/// still sending makes the server drop the connection, and the client sees
/// a reset).
#[tokio::test]
async fn a_refused_post_reads_its_body_and_keeps_the_connection() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let base = bmc(&sim, "compute-01");
    let addr = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let body = format!("{{\"ResetType\": \"{}\"}}", "x".repeat(4096));
    let (first, rest) = body.split_at(body.len() / 2);
    let head = format!(
        "POST {SYSTEM_RESET} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(first.as_bytes()).await.expect("write");
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(NO_ANSWER_YET, stream.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "answered ({early:?}) before the request body was complete"
    );
    stream.write_all(rest.as_bytes()).await.expect("write");
    let (status, answer) = read_answer(&mut stream).await;
    assert_eq!(status, 401, "{answer}");
    // The same connection serves the next request.
    let next = format!("GET /redfish/v1 HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(next.as_bytes()).await.expect("write");
    let (status, root) = read_answer(&mut stream).await;
    assert_eq!(status, 200, "{root}");
    sim.shutdown().await;
}
