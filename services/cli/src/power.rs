//! `flow power-domain …` and `flow power-model …`: power domains, the racks
//! in them and the draw models through `flow.api` (`power_domain.*`,
//! `rack.power_domains`, `power_model.*`).

use flow_client::{Client, ClientError};
use flow_config::Settings;
use flow_protocol::api::endpoint;
use flow_protocol::ids::RackRef;
use flow_protocol::power::{
    DomainName, PowerDomainByName, PowerDomainList, PowerDomainRecord, PowerDomainSet,
    PowerModelList, PowerModelSet, RackPowerDomains,
};
use flow_protocol::task::timestamp;

use crate::Outcome;
use crate::args::{PowerDomainCommand, PowerModelCommand};
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::json;
use crate::task::bad;

fn domain_name(text: &str) -> Result<DomainName, ClientError> {
    text.parse().map_err(bad)
}

/// A duration flag as milliseconds (`2s`, `500ms`).
fn millis(flag: &str, text: &str) -> Result<u64, ClientError> {
    let d = flow_rules::duration::parse_go(text).map_err(|e| bad(format!("{flag}: {e}")))?;
    if d.negative {
        return Err(bad(format!("{flag}: {text} is negative")));
    }
    u64::try_from(d.magnitude.as_millis()).map_err(|_| bad(format!("{flag}: {text} is too long")))
}

fn limit<T: std::fmt::Display>(v: Option<T>, unit: &str) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v}{unit}"))
}

fn print_domain(d: &PowerDomainRecord) {
    outln!("power domain {}", d.name);
    outln!("  budget:          {}", limit(d.budget_kw, " kW"));
    outln!("  max shelves off: {}", limit(d.max_shelves_off, ""));
    outln!("  min spacing:     {}", limit(d.min_spacing_ms, " ms"));
    outln!(
        "  in use:          {:.1} kW ({:.1} kW counted + {:.1} kW inrush; all on: {:.1} kW)",
        d.in_use_kw(),
        d.counted_kw,
        d.inrush_kw,
        d.steady_kw
    );
    if d.unknown > 0 {
        outln!(
            "  not known:       {} components, counted at steady draw (flow rack power <rack>)",
            d.unknown
        );
    }
    outln!("  shelves off:     {}", d.shelves_off);
    outln!("  waiting:         {}", d.waiting);
    outln!("  updated:         {}", timestamp::format(d.updated_at));
    outln!(
        "  racks ({}):       {}",
        d.racks.len(),
        if d.racks.is_empty() {
            "none".to_owned()
        } else {
            d.racks.join(", ")
        }
    );
}

/// `flow power-domain …`.
pub async fn domain(settings: &Settings, out: Output, command: &PowerDomainCommand) -> Outcome {
    let result = async {
        let client = Client::connect(settings).await?;
        match command {
            PowerDomainCommand::Set {
                name,
                budget_kw,
                max_shelves_off,
                min_spacing,
            } => {
                let request = PowerDomainSet {
                    name: domain_name(name)?,
                    budget_kw: *budget_kw,
                    max_shelves_off: *max_shelves_off,
                    min_spacing_ms: min_spacing
                        .as_deref()
                        .map(|t| millis("--min-spacing", t))
                        .transpose()?,
                };
                let d = client.call::<endpoint::PowerDomainSet>(&request).await?;
                if out.json {
                    json(&d);
                } else {
                    print_domain(&d);
                }
            }
            PowerDomainCommand::Show { name } => {
                let d = client
                    .call::<endpoint::PowerDomainGet>(&PowerDomainByName {
                        name: domain_name(name)?,
                    })
                    .await?;
                if out.json {
                    json(&d);
                } else {
                    print_domain(&d);
                }
            }
            PowerDomainCommand::List => {
                let list = client
                    .call::<endpoint::PowerDomainList>(&PowerDomainList {})
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&[
                        "DOMAIN",
                        "RACKS",
                        "BUDGET KW",
                        "IN USE KW",
                        "SHELVES OFF",
                        "SPACING",
                        "WAITING",
                    ]);
                    for d in &list.domains {
                        t.add_row(vec![
                            d.name.to_string(),
                            d.racks.len().to_string(),
                            limit(d.budget_kw, ""),
                            format!("{:.1}", d.in_use_kw()),
                            match d.max_shelves_off {
                                Some(cap) => format!("{}/{cap}", d.shelves_off),
                                None => d.shelves_off.to_string(),
                            },
                            limit(d.min_spacing_ms, " ms"),
                            d.waiting.to_string(),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            PowerDomainCommand::Delete { name } => {
                let r = client
                    .call::<endpoint::PowerDomainDelete>(&PowerDomainByName {
                        name: domain_name(name)?,
                    })
                    .await?;
                if out.json {
                    json(&r);
                } else if r.deleted {
                    outln!("power domain {name} deleted");
                } else {
                    outln!("no power domain {name}");
                }
            }
            PowerDomainCommand::Assign { rack, domains } => {
                let domains = domains
                    .iter()
                    .map(|d| domain_name(d))
                    .collect::<Result<Vec<_>, _>>()?;
                let r = client
                    .call::<endpoint::RackPowerDomains>(&RackPowerDomains {
                        rack: RackRef(rack.clone()),
                        domains,
                    })
                    .await?;
                if out.json {
                    json(&r);
                } else {
                    outln!(
                        "rack {} in power domains: {}",
                        r.name,
                        if r.power_domains.is_empty() {
                            "none".to_owned()
                        } else {
                            r.power_domains
                                .iter()
                                .map(DomainName::as_str)
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    );
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

/// `flow power-model …`.
pub async fn model(settings: &Settings, out: Output, command: &PowerModelCommand) -> Outcome {
    let result = async {
        let client = Client::connect(settings).await?;
        match command {
            PowerModelCommand::Set {
                component_type,
                inrush_w,
                steady_w,
                settle,
                rack_model,
            } => {
                let settle_ms = millis("--settle", settle)?;
                let m = client
                    .call::<endpoint::PowerModelSet>(&PowerModelSet {
                        component_type: component_type
                            .parse()
                            .map_err(|e| bad(format!("component type: {e}")))?,
                        rack_model: rack_model.clone(),
                        inrush_w: *inrush_w,
                        steady_w: *steady_w,
                        settle_ms: u32::try_from(settle_ms)
                            .map_err(|_| bad(format!("--settle: {settle} is too long")))?,
                    })
                    .await?;
                if out.json {
                    json(&m);
                } else {
                    outln!(
                        "{}{}: inrush {} W, steady {} W, settles in {} ms",
                        m.component_type,
                        if m.rack_model.is_empty() {
                            String::new()
                        } else {
                            format!(" in {}", m.rack_model)
                        },
                        m.inrush_w,
                        m.steady_w,
                        m.settle_ms
                    );
                }
            }
            PowerModelCommand::List => {
                let list = client
                    .call::<endpoint::PowerModelList>(&PowerModelList {})
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&["TYPE", "RACK MODEL", "INRUSH W", "STEADY W", "SETTLE MS"]);
                    for m in &list.models {
                        t.add_row(vec![
                            m.component_type.to_string(),
                            if m.rack_model.is_empty() {
                                "(all)".to_owned()
                            } else {
                                m.rack_model.clone()
                            },
                            m.inrush_w.to_string(),
                            m.steady_w.to_string(),
                            m.settle_ms.to_string(),
                        ]);
                    }
                    outln!("{t}");
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
