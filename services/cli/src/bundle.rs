//! `flow bundle …`: the firmware bundle catalog through `flow.api`
//! (`firmware_bundle.*`; docs/firmware.md).

use flow_client::ClientError;
use flow_config::Settings;
use flow_protocol::api::endpoint;
use flow_protocol::firmware::{BundleList, BundlePublish, BundleRecord, BundleRef};

use crate::Outcome;
use crate::args::BundleCommand;
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::json;
use crate::task::bad;

/// `flow bundle …`.
pub async fn bundle(settings: &Settings, out: Output, command: &BundleCommand) -> Outcome {
    let result = async {
        let client = crate::remote::connect(settings).await?;
        match command {
            BundleCommand::Publish { file } => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| bad(format!("{}: {e}", file.display())))?;
                let publish: BundlePublish = serde_saphyr::from_str(&text)
                    .map_err(|e| bad(format!("{}: {e}", file.display())))?;
                let b = client
                    .call::<endpoint::FirmwareBundlePublish>(&publish)
                    .await?;
                if out.json {
                    json(&b);
                } else {
                    outln!("published {} {}", b.name, b.version);
                    print_images(&b);
                }
            }
            BundleCommand::List { name, retired } => {
                let list = client
                    .call::<endpoint::FirmwareBundleList>(&BundleList {
                        name: name.clone(),
                        retired: *retired,
                    })
                    .await?;
                if out.json {
                    json(&list);
                } else if list.bundles.is_empty() {
                    outln!("no bundles");
                } else {
                    let mut t = table(&[
                        "NAME",
                        "VERSION",
                        "IMAGES",
                        "MODELS",
                        "PUBLISHED",
                        "BY",
                        "RETIRED",
                    ]);
                    for b in &list.bundles {
                        t.add_row(vec![
                            b.name.clone(),
                            b.version.clone(),
                            b.images
                                .iter()
                                .map(|i| format!("{} {}", i.slot(), i.version))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if b.models.is_empty() {
                                "any".to_owned()
                            } else {
                                b.models.join(", ")
                            },
                            flow_protocol::task::timestamp::format(b.published_at),
                            b.published_by.clone(),
                            b.retired_at
                                .map(flow_protocol::task::timestamp::format)
                                .unwrap_or_default(),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            BundleCommand::Show { name, version } => {
                let b = client
                    .call::<endpoint::FirmwareBundleGet>(&BundleRef {
                        name: name.clone(),
                        version: version.clone(),
                    })
                    .await?;
                if out.json {
                    json(&b);
                } else {
                    outln!("Bundle:    {} {}", b.name, b.version);
                    outln!(
                        "Models:    {}",
                        if b.models.is_empty() {
                            "any".to_owned()
                        } else {
                            b.models.join(", ")
                        }
                    );
                    outln!(
                        "Published: {} by {}",
                        flow_protocol::task::timestamp::format(b.published_at),
                        b.published_by
                    );
                    if let Some(at) = b.retired_at {
                        outln!("Retired:   {}", flow_protocol::task::timestamp::format(at));
                    }
                    print_images(&b);
                }
            }
            BundleCommand::Retire { name, version } => {
                let b = client
                    .call::<endpoint::FirmwareBundleRetire>(&BundleRef {
                        name: name.clone(),
                        version: version.clone(),
                    })
                    .await?;
                if out.json {
                    json(&b);
                } else {
                    outln!("retired {} {}", b.name, b.version);
                }
            }
        }
        Ok::<_, ClientError>(())
    }
    .await;
    match result {
        Ok(()) => Outcome::Valid,
        Err(e) => fail(e),
    }
}

fn print_images(b: &BundleRecord) {
    let mut t = table(&["IMAGE", "VERSION", "DIGEST", "SIZE", "URL"]);
    for i in &b.images {
        t.add_row(vec![
            i.slot(),
            i.version.clone(),
            i.digest.clone(),
            i.size.to_string(),
            i.url.clone(),
        ]);
    }
    outln!("{t}");
}
