//! The rack documents (`flow rack create --from-json`) of the simulated racks.

use flow_protocol::rack::{ComponentSpec, RackSpec};

use crate::world::World;

/// The credential reference every component's BMC carries.
pub const CREDENTIAL_REF: &str = "sim-bmc";

/// One rack document per rack: shelves, then switch trays, then compute
/// trays, each with its slot, identity, initial primary firmware version and
/// BMC URL.
pub(crate) fn inventory(world: &World) -> Vec<RackSpec> {
    (0..world.rack_count())
        .map(|r| {
            let name = world.rack_name_at(r).to_owned();
            let components = world
                .rack_components(r)
                .map(|at| {
                    let endpoint = world.endpoint(at);
                    let kind = endpoint.kind;
                    let profile = kind.profile();
                    let firmware_version = profile
                        .firmware
                        .iter()
                        .find(|f| f.id == profile.primary_firmware)
                        .map(|f| f.initial.to_owned())
                        .unwrap_or_default();
                    ComponentSpec {
                        component_type: kind.component_type().as_str().to_owned(),
                        name: endpoint.name.clone(),
                        slot: Some(endpoint.slot),
                        serial: endpoint.serial.clone(),
                        manufacturer: profile.manufacturer.to_owned(),
                        model: profile.model.to_owned(),
                        firmware_version,
                        bmc_url: endpoint.url.clone(),
                        credential_ref: CREDENTIAL_REF.to_owned(),
                    }
                })
                .collect();
            RackSpec {
                serial: format!("SIM-{name}"),
                name,
                manufacturer: "NVIDIA".to_owned(),
                model: "GB200 NVL72".to_owned(),
                location: "sim".to_owned(),
                labels: flow_protocol::labels::Labels::new(),
                power_domains: Vec::new(),
                components,
            }
        })
        .collect()
}
