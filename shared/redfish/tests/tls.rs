//! BMC TLS: verification is on by default (an untrusted certificate is a
//! permanent error), a CA file makes it trusted, and the insecure switch
//! skips verification.

use std::sync::Arc;

use flow_hardware::{ComponentManager, ComponentTarget, HardwareError, PowerStatus};
use flow_rack_sim::{InitialPower, SimConfig, TlsPem};
use flow_redfish::CredentialStore;
use flow_redfish::{RedfishManager, RedfishSettings};
use flow_rules::ComponentType;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_verified_unless_told_otherwise() {
    let generated = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert_pem = generated.cert.pem();
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        time_scale: 0.01,
        initial_power: InitialPower::On,
        compute: 1,
        nvswitch: 0,
        powershelf: 1,
        tls: Some(TlsPem {
            cert_pem: cert_pem.clone(),
            key_pem: generated.signing_key.serialize_pem(),
        }),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let url = sim.bmc_url("rack-01", "compute-01").unwrap();
    assert!(url.starts_with("https://"));
    let target = ComponentTarget {
        rack: "rack-01".into(),
        name: "compute-01".into(),
        component_type: ComponentType::Compute,
        bmc_url: url,
        credential_ref: "sim-bmc".into(),
        resource_id: None,
    };
    let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
    let manager = |settings: RedfishSettings| {
        RedfishManager::new(
            ComponentType::Compute,
            &settings,
            Arc::clone(&credentials),
            None,
        )
        .unwrap()
    };

    let e = manager(RedfishSettings::default())
        .power_status(&target)
        .await
        .unwrap_err();
    assert!(matches!(e, HardwareError::Tls { .. }), "{e}");
    assert!(
        !e.is_transient(),
        "an untrusted certificate is not worth a retry"
    );

    let dir = std::env::temp_dir().join(format!("flow-hw-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &cert_pem).unwrap();
    let trusted = manager(RedfishSettings {
        ca_file: Some(ca),
        ..RedfishSettings::default()
    });
    assert_eq!(
        trusted.power_status(&target).await.unwrap(),
        PowerStatus::On
    );
    let insecure = manager(RedfishSettings {
        insecure: true,
        ..RedfishSettings::default()
    });
    assert_eq!(
        insecure.power_status(&target).await.unwrap(),
        PowerStatus::On
    );
    let missing = RedfishManager::new(
        ComponentType::Compute,
        &RedfishSettings {
            ca_file: Some(dir.join("nope.pem")),
            ..RedfishSettings::default()
        },
        Arc::clone(&credentials),
        None,
    );
    assert!(
        matches!(missing, Err(HardwareError::Config(m)) if m.contains("cannot read BMC CA file"))
    );
    std::fs::remove_dir_all(&dir).unwrap();
    sim.shutdown().await;
}
