//! `examples/rack-nvl72.json` is what the simulator prints for its default
//! rack with `--bmc-base-port 18801`: same components, consecutive ports.

use flow_protocol::rack::RackSpec;
use flow_rack_sim::SimConfig;

#[tokio::test]
async fn the_shipped_example_rack_is_the_simulators_default_rack() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/rack-nvl72.json"
    );
    let example: RackSpec =
        serde_json::from_str(&std::fs::read_to_string(path).expect("example")).expect("rack JSON");
    assert!(example.validate().is_empty());
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let rack = sim.inventory().remove(0);
    sim.shutdown().await;
    assert_eq!(example.name, rack.name);
    assert_eq!(example.components.len(), 35);
    for (i, (e, s)) in example.components.iter().zip(&rack.components).enumerate() {
        assert_eq!(
            (&e.component_type, &e.name, e.slot),
            (&s.component_type, &s.name, s.slot)
        );
        assert_eq!(e.firmware_version, s.firmware_version, "{}", e.name);
        assert_eq!(
            e.bmc_url,
            format!("http://127.0.0.1:{}", 18801 + i),
            "{}",
            e.name
        );
        assert_eq!(e.credential_ref, "sim-bmc");
    }
}
