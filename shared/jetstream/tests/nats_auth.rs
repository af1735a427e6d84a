//! Every NATS authentication option of [`flow_config::NatsSettings`], set
//! through its `FLOW_NATS_*` variable, against a real `nats-server`
//! configured for it: user/password, token, nkey, TLS with a private CA and
//! mutual TLS. Each also fails clearly when the credential is wrong or
//! missing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_nats::ConnectErrorKind;
use flow_config::Settings;
use flow_jetstream::{InitialConnect, connect_nats};
use flow_tests::NatsServer;

/// A directory of its own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "flow-nats-auth-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Settings from `FLOW_*` variables only (no file, nothing from the
/// process environment), validated as every binary does.
fn settings(vars: &[(&str, &str)]) -> Settings {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let settings = Settings::load(None, &|k| map.get(k).cloned()).expect("settings load");
    settings.validate_nats().expect("settings validate");
    settings
}

async fn connect(vars: &[(&str, &str)]) -> Result<async_nats::Client, async_nats::ConnectError> {
    connect_nats(
        &settings(vars).nats,
        "flow-auth-test",
        InitialConnect::FailFast,
    )
    .await
}

/// Proves the connection is really usable: a request answered by ourselves.
async fn round_trip(client: &async_nats::Client) {
    use futures::StreamExt;
    let mut sub = client.subscribe("auth.echo").await.expect("subscribe");
    let responder = client.clone();
    let echo = tokio::spawn(async move {
        if let Some(msg) = sub.next().await
            && let Some(reply) = msg.reply
        {
            responder.publish(reply, msg.payload).await.expect("reply");
        }
    });
    let reply = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.request("auth.echo", "ping".into()),
    )
    .await
    .expect("answered in time")
    .expect("request");
    assert_eq!(&reply.payload[..], b"ping");
    echo.await.expect("echo task");
}

fn expect_failure(
    result: Result<async_nats::Client, async_nats::ConnectError>,
    kind: ConnectErrorKind,
    what: &str,
) -> String {
    match result {
        Ok(_) => panic!("{what}: the server accepted the connection"),
        Err(error) => {
            assert_eq!(error.kind(), kind, "{what}: {error}");
            error.to_string()
        }
    }
}

#[tokio::test]
async fn user_and_password_connect_and_a_wrong_password_is_refused() {
    let nats = NatsServer::start_with_config(
        "authorization { users: [ {user: flow, password: \"right-pass-1\"} ] }",
    );
    let url = nats.url();
    let client = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_USER", "flow"),
        ("FLOW_NATS_PASSWORD", "right-pass-1"),
    ])
    .await
    .expect("user/password accepted");
    round_trip(&client).await;

    let wrong = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_USER", "flow"),
        ("FLOW_NATS_PASSWORD", "wrong-pass-2"),
    ])
    .await;
    let message = expect_failure(
        wrong,
        ConnectErrorKind::AuthorizationViolation,
        "wrong password",
    );
    assert!(
        message.contains("authorization violation"),
        "the error says why: {message}"
    );
    assert!(
        !message.contains("wrong-pass-2"),
        "the error leaks the password: {message}"
    );
    let anonymous = connect(&[("FLOW_NATS_URL", &url)]).await;
    expect_failure(
        anonymous,
        ConnectErrorKind::AuthorizationViolation,
        "no credentials",
    );
}

#[tokio::test]
async fn a_token_connects_and_a_wrong_token_is_refused() {
    let nats = NatsServer::start_with_config("authorization { token: \"right-token-1\" }");
    let url = nats.url();
    let client = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_TOKEN", "right-token-1"),
    ])
    .await
    .expect("token accepted");
    round_trip(&client).await;
    let wrong = connect(&[("FLOW_NATS_URL", &url), ("FLOW_NATS_TOKEN", "wrong-token")]).await;
    expect_failure(
        wrong,
        ConnectErrorKind::AuthorizationViolation,
        "wrong token",
    );
}

#[tokio::test]
async fn an_nkey_seed_file_connects_and_another_key_is_refused() {
    let user = nkeys::KeyPair::new_user();
    let nats = NatsServer::start_with_config(&format!(
        "authorization {{ users: [ {{nkey: {}}} ] }}",
        user.public_key()
    ));
    let url = nats.url();
    let dir = TempDir::new("nkey");
    // A trailing newline, as `nk -gen user > file` writes it.
    let seed = dir.write(
        "flow.nk",
        &format!("{}\n", user.seed().expect("seed of a fresh key")),
    );
    let client = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_NKEY_FILE", seed.to_str().expect("utf-8 path")),
    ])
    .await
    .expect("nkey accepted");
    round_trip(&client).await;

    let stranger = dir.write(
        "stranger.nk",
        &nkeys::KeyPair::new_user().seed().expect("seed"),
    );
    let refused = connect(&[
        ("FLOW_NATS_URL", &url),
        (
            "FLOW_NATS_NKEY_FILE",
            stranger.to_str().expect("utf-8 path"),
        ),
    ])
    .await;
    expect_failure(
        refused,
        ConnectErrorKind::AuthorizationViolation,
        "an nkey the server does not know",
    );
}

/// A private CA, a server certificate for 127.0.0.1 and a client
/// certificate, all signed by it, as PEM files.
struct Pki {
    dir: TempDir,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };
        let dir = TempDir::new("tls");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Flow test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, label: &str| {
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, label);
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &ca).expect("leaf certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key_pem) = leaf(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "nats-server",
        );
        let (client_pem, client_key_pem) = leaf(
            vec!["flow-client".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
            "flow-client",
        );
        Pki {
            ca: dir.write("ca.pem", &ca.pem()),
            server_cert: dir.write("server.pem", &server_pem),
            server_key: dir.write("server-key.pem", &server_key_pem),
            client_cert: dir.write("client.pem", &client_pem),
            client_key: dir.write("client-key.pem", &client_key_pem),
            dir,
        }
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test]
async fn tls_with_a_private_ca_connects_and_a_client_without_the_ca_is_refused() {
    let pki = Pki::new();
    let nats = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n}}\n",
        path(&pki.server_cert),
        path(&pki.server_key)
    ));
    let url = format!("tls://127.0.0.1:{}", nats.port());
    let client = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_TLS_CA_FILE", path(&pki.ca)),
    ])
    .await
    .expect("TLS with the CA accepted");
    round_trip(&client).await;
    // A nats:// URL with TLS required also upgrades.
    let required = connect(&[
        ("FLOW_NATS_URL", &nats.url()),
        ("FLOW_NATS_TLS_CA_FILE", path(&pki.ca)),
        ("FLOW_NATS_TLS_REQUIRED", "true"),
    ])
    .await
    .expect("TLS required over nats:// accepted");
    round_trip(&required).await;

    // rustls refuses the handshake; async-nats reports it as I/O.
    let untrusted = connect(&[("FLOW_NATS_URL", &url)]).await;
    let message = expect_failure(untrusted, ConnectErrorKind::Io, "a client without the CA");
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "the error names the certificate problem: {message}"
    );
    let _ = &pki.dir;
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = Pki::new();
    let nats = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        path(&pki.server_cert),
        path(&pki.server_key),
        path(&pki.ca)
    ));
    let url = format!("tls://127.0.0.1:{}", nats.port());
    let client = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_TLS_CA_FILE", path(&pki.ca)),
        ("FLOW_NATS_TLS_CERT_FILE", path(&pki.client_cert)),
        ("FLOW_NATS_TLS_KEY_FILE", path(&pki.client_key)),
    ])
    .await
    .expect("mutual TLS accepted");
    round_trip(&client).await;

    // The server drops the handshake of a client with no certificate.
    let anonymous = connect(&[
        ("FLOW_NATS_URL", &url),
        ("FLOW_NATS_TLS_CA_FILE", path(&pki.ca)),
    ])
    .await;
    assert!(
        anonymous.is_err(),
        "the server accepted a client without a certificate"
    );
}
