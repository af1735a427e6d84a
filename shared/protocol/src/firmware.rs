//! `firmware_bundle.*` on `flow.api`: the catalog of firmware bundles
//! (`docs/firmware.md`). A bundle is a named, versioned set of images —
//! one per component type and sub-target — each with its version, the URL
//! it is fetched from, its `sha256:` digest and its size (the OCI
//! spelling), and the rack models it fits. Published once and immutable:
//! the same name and version published again with the same contents is
//! the same bundle; with other contents it is refused, naming the image.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::api::ApiError;
use crate::jobs::SubTarget;
use flow_rules::ComponentType;

/// The longest bundle name or version.
pub const MAX_NAME_LEN: usize = 128;

/// The largest image accepted, bytes (64 GiB).
pub const MAX_IMAGE_BYTES: u64 = 64 << 30;

/// One image of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleImage {
    /// The component type it is for.
    pub component_type: ComponentType,
    /// Which firmware of the component it flashes (absent: its main one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_target: Option<SubTarget>,
    /// The version it installs.
    pub version: String,
    /// Where Flow fetches it from (its origin; BMCs are never given it).
    pub url: String,
    /// Its content digest: `sha256:` and 64 lower-case hex digits.
    pub digest: String,
    /// Its size, bytes.
    pub size: u64,
}

impl BundleImage {
    /// `compute`, `nvswitch/nvos`: how an image is named in messages.
    pub fn slot(&self) -> String {
        match self.sub_target {
            Some(sub) => format!("{}/{sub}", self.component_type.as_str()),
            None => self.component_type.as_str().to_owned(),
        }
    }
}

/// `firmware_bundle.publish`: a bundle to add to the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundlePublish {
    /// Its name (`gb200-fw`).
    pub name: String,
    /// Its version (`2026.11`).
    pub version: String,
    /// The rack models it fits (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Its images, one per component type and sub-target.
    pub images: Vec<BundleImage>,
}

/// Whether `digest` is `sha256:` and 64 lower-case hex digits.
pub fn is_sha256(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn bad(field: String, problem: String) -> String {
    format!("{field}: {problem}")
}

fn check_name(field: &str, text: &str) -> Option<String> {
    if text.is_empty()
        || text.len() > MAX_NAME_LEN
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
    {
        Some(bad(
            field.to_owned(),
            format!(
                "{text:?} is not a name (1 to {MAX_NAME_LEN} of letters, digits, '-', '_', '.', '+')"
            ),
        ))
    } else {
        None
    }
}

impl BundlePublish {
    /// Every problem decoding cannot see, each naming its field: names,
    /// digests, sizes, URLs, sub-targets of the type, one image per slot.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(check_name("name", &self.name));
        out.extend(check_name("version", &self.version));
        if self.images.is_empty() {
            out.push("images: a bundle holds at least one image".to_owned());
        }
        let mut slots = std::collections::BTreeSet::new();
        for (i, image) in self.images.iter().enumerate() {
            let at = format!("images[{i}] ({})", image.slot());
            if !slots.insert(image.slot()) {
                out.push(bad(
                    at.clone(),
                    "a second image for the same component type and sub-target".to_owned(),
                ));
            }
            if let Some(sub) = image.sub_target
                && !SubTarget::of(image.component_type).contains(&sub)
            {
                out.push(bad(
                    format!("{at}.sub_target"),
                    format!("{sub} is not a sub-target of {}", image.component_type),
                ));
            }
            if image.version.trim().is_empty() {
                out.push(bad(format!("{at}.version"), "empty".to_owned()));
            }
            if !is_sha256(&image.digest) {
                out.push(bad(
                    format!("{at}.digest"),
                    format!(
                        "{:?} is not sha256: and 64 lower-case hex digits",
                        image.digest
                    ),
                ));
            }
            if image.size == 0 || image.size > MAX_IMAGE_BYTES {
                out.push(bad(
                    format!("{at}.size"),
                    format!("{} bytes is not an image size", image.size),
                ));
            }
            if !(image.url.starts_with("http://") || image.url.starts_with("https://"))
                || image.url.chars().any(char::is_whitespace)
            {
                out.push(bad(
                    format!("{at}.url"),
                    format!("{:?} is not an http(s) URL", image.url),
                ));
            }
        }
        out
    }

    /// [`BundlePublish::problems`] as the API's `invalid` error.
    pub fn check(&self) -> Result<(), ApiError> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid(
            format!("the bundle is invalid: {}", problems.join("; ")),
            problems,
        ))
    }
}

/// A bundle as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleRecord {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The rack models it fits (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Its images, by component type then sub-target.
    pub images: Vec<BundleImage>,
    /// Who published it (the audit's actor).
    pub published_by: String,
    /// When.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub published_at: OffsetDateTime,
    /// When it was retired (no new task may name it), if it was.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub retired_at: Option<OffsetDateTime>,
}

/// `firmware_bundle.get` and `firmware_bundle.retire`: one bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleRef {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// A firmware task's bundle: the published bundle whose images it
/// installs, one per component type its rule flashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskBundle {
    /// The bundle's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Take the images of these sub-targets instead of each type's main
    /// one (`nvos`, `psu`, …; a task flashes one image per component type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_targets: Vec<SubTarget>,
}

impl std::fmt::Display for TaskBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

/// One component's firmware version as a firmware task found it: the
/// task's snapshot, taken at submission before anything changed (what
/// `flow firmware restore` brings a component back to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InstalledVersion {
    /// The component's name.
    pub component: String,
    /// Its type.
    pub component_type: ComponentType,
    /// The version of its main firmware the inventory recorded (empty: not
    /// known).
    pub version: String,
}

/// `firmware_bundle.list`: the catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleList {
    /// Only bundles of this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Retired bundles too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
}

/// `firmware_bundle.list` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BundleListReply {
    /// By name, then newest published first.
    pub bundles: Vec<BundleRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(t: ComponentType, sub: Option<SubTarget>) -> BundleImage {
        BundleImage {
            component_type: t,
            sub_target: sub,
            version: "1.2".into(),
            url: "http://fw.example/a.bin".into(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            size: 1024,
        }
    }

    #[test]
    fn digests_are_sha256_in_the_oci_spelling() {
        assert!(is_sha256(&format!("sha256:{}", "0f".repeat(32))));
        for bad in [
            "sha256:".to_owned(),
            format!("sha256:{}", "0F".repeat(32)),
            format!("sha512:{}", "0f".repeat(32)),
            format!("sha256:{}", "0f".repeat(31)),
            "0f".repeat(32),
        ] {
            assert!(!is_sha256(&bad), "{bad}");
        }
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let mut bad = image(ComponentType::Compute, Some(SubTarget::Nvos));
        bad.digest = "md5:abc".into();
        bad.size = 0;
        bad.url = "ftp://x".into();
        let publish = BundlePublish {
            name: "gb200 fw".into(),
            version: "2026.11".into(),
            models: vec![],
            images: vec![
                bad,
                image(ComponentType::NVSwitch, Some(SubTarget::Nvos)),
                image(ComponentType::NVSwitch, Some(SubTarget::Nvos)),
            ],
        };
        let problems = publish.problems();
        for expected in [
            "name: \"gb200 fw\" is not a name",
            "images[0] (Compute/nvos).sub_target: nvos is not a sub-target of Compute",
            "images[0] (Compute/nvos).digest: \"md5:abc\" is not sha256:",
            "images[0] (Compute/nvos).size: 0 bytes",
            "images[0] (Compute/nvos).url: \"ftp://x\" is not an http(s) URL",
            "images[2] (NVSwitch/nvos): a second image",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(expected)),
                "{expected} not in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), 6, "{problems:#?}");
    }
}
