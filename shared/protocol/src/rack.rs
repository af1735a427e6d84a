//! The rack document operators load with `flow rack create --from-json`: a
//! rack and its components, each with its BMC endpoint and a credential
//! *reference* (a name the worker resolves from its own configuration — never
//! a password).

use std::collections::HashSet;

use flow_rules::ComponentType;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A rack as written in a rack document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackSpec {
    /// Unique rack name.
    pub name: String,
    /// Vendor.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manufacturer: String,
    /// Model, e.g. `GB200 NVL72`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Serial number.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub serial: String,
    /// Where it stands, e.g. `dc1/row3/pos7`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
    /// Free-form labels (`site`, `row`, `pod`, …) that tasks target racks
    /// by.
    #[serde(default, skip_serializing_if = "crate::labels::Labels::is_empty")]
    pub labels: crate::labels::Labels,
    /// The power domains it belongs to (`site`, `row=B`, a PDU): each
    /// power-on in it takes a share of their budgets
    /// (`docs/operating-safety.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_domains: Vec<crate::power::DomainName>,
    /// Its components.
    #[serde(default)]
    pub components: Vec<ComponentSpec>,
}

/// A component as written in a rack document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentSpec {
    /// Component type (any case; `NVLSwitch` accepted).
    #[serde(rename = "type")]
    #[schemars(with = "ComponentType")]
    pub component_type: String,
    /// Name, unique within the rack, e.g. `compute-01`.
    pub name: String,
    /// Slot or tray position in the rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Vendor.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manufacturer: String,
    /// Model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Serial number.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub serial: String,
    /// Installed firmware version, as last known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub firmware_version: String,
    /// The BMC's base URL (`https://…` or `http://…`).
    pub bmc_url: String,
    /// Name of the credential the worker uses for this BMC.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub credential_ref: String,
}

/// Longest rack or component name.
pub const MAX_NAME_LEN: usize = 128;

impl RackSpec {
    /// Checks what serde cannot: names, types, URLs and uniqueness. Returns
    /// every problem, each naming its field.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        check_name("name", &self.name, &mut problems);
        problems.extend(crate::labels::problems("labels", &self.labels));
        let mut seen = HashSet::new();
        for (i, c) in self.components.iter().enumerate() {
            let at = format!("components[{i}]");
            check_name(&format!("{at}.name"), &c.name, &mut problems);
            if !seen.insert(c.name.as_str()) {
                problems.push(format!(
                    "{at}.name: {:?} is used by an earlier component; names are unique per rack",
                    c.name
                ));
            }
            if let Err(e) = c.component_type.parse::<ComponentType>() {
                problems.push(format!("{at}.type: {e}"));
            }
            let url = c.bmc_url.as_str();
            let rest = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"));
            match rest {
                Some(host) if !host.is_empty() && !host.starts_with('/') => {}
                _ => problems.push(format!(
                    "{at}.bmc_url: must be an http:// or https:// URL with a host, got {url:?}"
                )),
            }
            if url.contains('@') {
                problems.push(format!(
                    "{at}.bmc_url: must not carry credentials; name them with credential_ref"
                ));
            }
        }
        problems
    }

    /// The component type of each component, once validated.
    pub fn component_type(c: &ComponentSpec) -> Option<ComponentType> {
        c.component_type.parse().ok()
    }
}

fn check_name(field: &str, name: &str, problems: &mut Vec<String>) {
    if name.trim().is_empty() {
        problems.push(format!("{field}: must not be empty"));
    } else if name.chars().count() > MAX_NAME_LEN {
        problems.push(format!(
            "{field}: must be at most {MAX_NAME_LEN} characters"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(components: serde_json::Value) -> RackSpec {
        serde_json::from_value(serde_json::json!({"name": "r1", "components": components}))
            .expect("rack spec")
    }

    #[test]
    fn a_good_rack_has_no_problems() {
        let rack = spec(serde_json::json!([
            {"type": "compute", "name": "c1", "bmc_url": "https://10.0.0.1", "credential_ref": "bmc"},
            {"type": "NVLSwitch", "name": "s1", "bmc_url": "http://127.0.0.1:8800/bmc/r1/s1"}
        ]));
        assert_eq!(rack.validate(), Vec::<String>::new());
    }

    #[test]
    fn problems_name_their_field() {
        let rack = spec(serde_json::json!([
            {"type": "gpu", "name": "c1", "bmc_url": "ftp://x"},
            {"type": "compute", "name": "c1", "bmc_url": "https://root:pw@10.0.0.1"}
        ]));
        let problems = rack.validate();
        assert!(problems[0].starts_with("components[0].type: unknown component type \"gpu\""));
        assert!(problems[1].starts_with("components[0].bmc_url: must be an http"));
        assert!(problems[2].starts_with("components[1].name: \"c1\" is used by an earlier"));
        assert!(problems[3].starts_with("components[1].bmc_url: must not carry credentials"));
    }

    #[test]
    fn a_password_field_is_refused() {
        let err = serde_json::from_value::<RackSpec>(serde_json::json!({
            "name": "r1",
            "components": [{"type": "compute", "name": "c1", "bmc_url": "https://x",
                            "password": "secret"}]
        }))
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown field `password`"),
            "{err}"
        );
    }
}
