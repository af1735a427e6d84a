//! The nats-server fixture: a real, private, JetStream-enabled server per test.

use flow_tests::NatsServer;
use serde_json::Value;

fn varz(server: &NatsServer) -> Value {
    let body = server.varz();
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/varz is not JSON ({e}): {body}"))
}

/// Parses "2.14.6" (or "2.11.0-RC.1") into (major, minor).
fn major_minor(version: &str) -> (u64, u64) {
    let mut parts = version.split(['.', '-']);
    let mut next = |what: &str| -> u64 {
        parts
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no {what} number in version {version:?}"))
    };
    let major = next("major");
    let minor = next("minor");
    (major, minor)
}

#[test]
fn server_is_recent_and_has_jetstream_on_with_sync_always() {
    let server = NatsServer::start();
    let varz = varz(&server);

    let version = varz["version"]
        .as_str()
        .unwrap_or_else(|| panic!("no version in /varz: {varz}"));
    assert!(
        major_minor(version) >= (2, 10),
        "nats-server {version} is older than 2.10 (FLOW_NATS_SERVER points at the wrong binary?)"
    );

    assert_eq!(varz["server_name"], server.name(), "{varz}");
    assert_eq!(varz["port"], u64::from(server.port()), "{varz}");
    assert_eq!(varz["host"], "127.0.0.1", "{varz}");

    let jetstream = &varz["jetstream"]["config"];
    assert!(
        jetstream.is_object(),
        "JetStream is not enabled (no jetstream.config in /varz): {varz}"
    );
    let store_dir = jetstream["store_dir"]
        .as_str()
        .unwrap_or_else(|| panic!("no jetstream.config.store_dir in /varz: {varz}"));
    assert!(
        std::path::Path::new(store_dir).starts_with(server.store_dir()),
        "store dir {store_dir} is not under {}",
        server.store_dir().display()
    );
    assert_eq!(
        jetstream["sync_always"], true,
        "the config file's `sync_interval: always` was not applied: {varz}"
    );

    assert!(
        server.url().starts_with("nats://127.0.0.1:"),
        "{}",
        server.url()
    );
    assert_eq!(
        server.monitor_url(),
        format!("http://127.0.0.1:{}", server.monitor_port())
    );
}

#[test]
fn servers_started_at_once_get_their_own_ports_and_store() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(NatsServer::start);
        let b = s.spawn(NatsServer::start);
        let join = |h: std::thread::ScopedJoinHandle<'_, NatsServer>| {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        };
        (join(a), join(b))
    });

    let ports_a = [a.port(), a.monitor_port()];
    let ports_b = [b.port(), b.monitor_port()];
    assert!(
        ports_a.iter().all(|p| !ports_b.contains(p)) && ports_a[0] != ports_a[1],
        "ports overlap: a={ports_a:?} b={ports_b:?}"
    );
    assert_ne!(a.url(), b.url());
    assert_ne!(a.store_dir(), b.store_dir());

    // Each monitoring port answers for its own server.
    assert_eq!(varz(&a)["server_name"], a.name());
    assert_eq!(varz(&b)["server_name"], b.name());
}

#[test]
fn dropping_the_server_stops_it_and_removes_its_files() {
    let server = NatsServer::start();
    let port = server.port();
    let store = server.store_dir();
    assert!(store.exists(), "{} missing while running", store.display());
    drop(server);

    assert!(
        !store.exists(),
        "{} still exists after drop",
        store.display()
    );
    // Drop waited for the process to exit, so nothing listens on the port any more.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_err(),
        "something still accepts connections on {addr} after drop"
    );
}

#[test]
fn a_cluster_joins_three_nodes_each_with_its_own_store_and_sync_always() {
    let mut cluster = flow_tests::NatsCluster::start(3);
    let names: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.name().to_owned())
        .collect();
    for node in cluster.nodes() {
        let v = varz(node);
        assert_eq!(v["jetstream"]["config"]["sync_always"], true, "{v}");
        let store = v["jetstream"]["config"]["store_dir"].as_str().unwrap();
        assert!(
            std::path::Path::new(store).starts_with(node.store_dir()),
            "{store} is not {}'s own",
            node.name()
        );
        let routez: Value = serde_json::from_str(&node.monitor_get("/routez")).unwrap();
        let mut peers: Vec<&str> = routez["routes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["remote_name"].as_str().unwrap())
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let others: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| *n != node.name())
            .collect();
        assert_eq!(peers, others, "{} routes to the other two", node.name());
    }
    let urls = cluster.urls_from(1);
    assert!(urls.starts_with(&cluster.nodes()[1].url()), "{urls}");
    assert_eq!(urls.split(',').count(), 3, "{urls}");
    // A paused node stops answering; resumed, it answers again.
    cluster.node(2).pause();
    assert!(!cluster.nodes()[2].healthy(), "a paused node answered");
    cluster.node(2).resume();
    flow_tests::wait_until(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        || cluster.nodes()[2].healthy(),
    )
    .expect("the resumed node answers");
    assert_eq!(cluster.index_of(&names[1]), Some(1));
}
