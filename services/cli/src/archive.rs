//! `flow admin archive …` and `flow audit verify`: the history archive
//! through `flow.api` (`archive.*`, `audit.verify`; docs/operating.md,
//! "History and the archive").

use flow_client::ClientError;
use flow_config::Settings;
use flow_protocol::TaskId;
use flow_protocol::api::endpoint;
use flow_protocol::history::{ArchiveList, ArchiveShow, ArchiveVerify, AuditVerify, SegmentKind};

use crate::Outcome;
use crate::args::ArchiveCommand;
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::json;
use crate::task::bad;

fn kind(text: &str) -> Result<SegmentKind, ClientError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
        bad(format!(
            "--kind: {text:?} is not one of tasks, audit, events, firings"
        ))
    })
}

/// `flow admin archive …`.
pub async fn archive(settings: &Settings, out: Output, command: &ArchiveCommand) -> Outcome {
    let result = async {
        let request_kind = match command {
            ArchiveCommand::List { kind: Some(k) } => Some(kind(k)?),
            _ => None,
        };
        let task = match command {
            ArchiveCommand::Show { task: Some(t), .. } => Some(
                t.parse::<uuid::Uuid>()
                    .map(TaskId)
                    .map_err(|_| bad(format!("--task: {t:?} is not a task ID")))?,
            ),
            _ => None,
        };
        let client = crate::remote::connect(settings).await?;
        match command {
            ArchiveCommand::List { .. } => {
                let list = client
                    .call::<endpoint::ArchiveList>(&ArchiveList { kind: request_kind })
                    .await?;
                if out.json {
                    json(&list);
                } else if list.segments.is_empty() {
                    outln!("no segments in {}", list.dir);
                } else {
                    let mut t = table(&["SEGMENT", "RECORDS", "FROM", "TO", "BYTES", "SHA256"]);
                    for s in &list.segments {
                        t.add_row(vec![
                            s.segment.clone(),
                            s.records.to_string(),
                            s.first_at.clone().unwrap_or_default(),
                            s.last_at.clone().unwrap_or_default(),
                            s.bytes.to_string(),
                            s.sha256.clone(),
                        ]);
                    }
                    outln!("{}", list.dir);
                    outln!("{t}");
                }
                Ok(Outcome::Valid)
            }
            ArchiveCommand::Show { segment, .. } => {
                let shown = client
                    .call::<endpoint::ArchiveShow>(&ArchiveShow {
                        segment: segment.clone(),
                        task,
                    })
                    .await?;
                match (&shown.task, out.json) {
                    (Some(task), _) => json(task),
                    (None, true) => json(&shown),
                    (None, false) => {
                        let s = &shown.segment;
                        outln!("segment:  {}", s.segment);
                        outln!(
                            "kind:     {}",
                            serde_json::to_value(s.kind)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default()
                        );
                        outln!("written:  {}", s.created_at);
                        outln!("records:  {}", s.records);
                        outln!("from:     {}", s.first_at.clone().unwrap_or_default());
                        outln!("to:       {}", s.last_at.clone().unwrap_or_default());
                        outln!("bytes:    {}", s.bytes);
                        outln!("sha256:   {}", s.sha256);
                        if let Some(c) = &s.chain {
                            outln!("seals:    {}..{}", c.first_seq, c.last_seq);
                            outln!("follows:  {}", c.prev_hash);
                            outln!("ends at:  {}", c.last_hash);
                        }
                    }
                }
                Ok(Outcome::Valid)
            }
            ArchiveCommand::Verify { segment } => {
                let verdict = client
                    .call::<endpoint::ArchiveVerify>(&ArchiveVerify {
                        segment: segment.clone(),
                    })
                    .await?;
                if out.json {
                    json(&verdict);
                } else {
                    for s in &verdict.segments {
                        if s.problems.is_empty() {
                            outln!("ok       {} ({} records)", s.segment, s.records);
                        } else {
                            for p in &s.problems {
                                outln!("FAILED   {}: {p}", s.segment);
                            }
                        }
                    }
                    for p in &verdict.chain_problems {
                        outln!("FAILED   audit chain: {p}");
                    }
                    outln!(
                        "{} segments: {}",
                        verdict.segments.len(),
                        if verdict.ok {
                            "verified"
                        } else {
                            "NOT verified"
                        }
                    );
                }
                Ok(if verdict.ok {
                    Outcome::Valid
                } else {
                    Outcome::Invalid
                })
            }
        }
    }
    .await;
    match result {
        Ok(outcome) => outcome,
        Err(e) => fail(e),
    }
}

/// `flow audit verify`.
pub async fn audit_verify(settings: &Settings, out: Output) -> Outcome {
    let result = async {
        let client = crate::remote::connect(settings).await?;
        let v = client.call::<endpoint::AuditVerify>(&AuditVerify {}).await?;
        if out.json {
            json(&v);
        } else {
            for p in &v.problems {
                outln!("FAILED   {p}");
            }
            outln!(
                "audit chain {}: {} archived and {} live records checked, {} not sealed yet; head {}",
                if v.ok { "verified" } else { "NOT verified" },
                v.archived,
                v.sealed,
                v.unsealed,
                v.head
            );
        }
        Ok::<_, ClientError>(if v.ok { Outcome::Valid } else { Outcome::Invalid })
    }
    .await;
    match result {
        Ok(outcome) => outcome,
        Err(e) => fail(e),
    }
}
