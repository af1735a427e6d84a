//! HTTPS with a generated certificate (rustls, ring provider).

mod common;

use common::*;
use flow_rack_sim::{InitialPower, TlsPem};
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test]
async fn bmcs_and_admin_serve_https_with_the_given_certificate() {
    let generated =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("self-signed certificate");
    let cert_pem = generated.cert.pem();
    let mut config = small(InitialPower::On, 0.01);
    config.tls = Some(TlsPem {
        cert_pem: cert_pem.clone(),
        key_pem: generated.signing_key.serialize_pem(),
    });
    let sim = start(config).await;
    let base = bmc(&sim, "compute-01");
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    assert!(sim.admin_url().starts_with("https://"));
    assert!(
        sim.inventory()[0]
            .components
            .iter()
            .all(|c| c.bmc_url.starts_with("https://"))
    );

    let trusting = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).expect("cert"))
        .build()
        .expect("client");
    let (status, system) = get(&trusting, &base, SYSTEM).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(system["PowerState"], "On");
    let response = trusting
        .get(format!("{}/admin/v1/state", sim.admin_url()))
        .send()
        .await
        .expect("admin over https");
    assert_eq!(response.status(), StatusCode::OK);
    let _: Value = response.json().await.expect("state");

    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .build()
        .expect("client");
    let error = untrusting
        .get(format!("{base}/redfish/v1"))
        .send()
        .await
        .expect_err("an unknown certificate is refused");
    assert!(error.is_connect(), "{error:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_pem_is_refused_at_start() {
    let mut config = small(InitialPower::Off, 0.01);
    config.tls = Some(TlsPem {
        cert_pem: "not a certificate".to_owned(),
        key_pem: "not a key".to_owned(),
    });
    let error = flow_rack_sim::start(config)
        .await
        .err()
        .expect("start must fail");
    assert!(
        matches!(error, flow_rack_sim::SimError::Tls(_)),
        "{error:?}"
    );
}
