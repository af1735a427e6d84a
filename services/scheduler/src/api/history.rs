//! The `archive.*` endpoints and `audit.verify`: the archive the history
//! pass writes ([`crate::history`]), read and checked through the
//! scheduler that writes it.

use flow_archive::{ArchiveError, Manifest};
use flow_protocol::api::endpoint as ep;
use flow_protocol::api::{ApiError, ErrorCode};
use flow_protocol::history::{
    ArchiveListReply, ArchiveSegment, ArchiveShowReply, ArchiveVerifyReply, AuditVerifyReply,
    ChainSpan, SegmentKind, SegmentVerdict,
};
use serde_json::Value;

use super::table::{Cx, Handle};
use crate::error::store_error;
use crate::history::History;

fn history<'a>(cx: &Cx<'a>) -> Result<&'a History, ApiError> {
    cx.tasks.history.as_deref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "no archive: this scheduler keeps history in full (start it with --archive-dir to bound it)",
        )
    })
}

fn archive_error(e: ArchiveError) -> ApiError {
    match e {
        ArchiveError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
        ArchiveError::BadName(_) => ApiError::new(ErrorCode::BadRequest, e.to_string()),
        other => {
            tracing::error!(error = %flow_telemetry::ErrorChain(&other), "archive read failed");
            ApiError::new(ErrorCode::Internal, format!("the archive failed: {other}"))
        }
    }
}

fn kind(k: flow_archive::Kind) -> SegmentKind {
    match k {
        flow_archive::Kind::Tasks => SegmentKind::Tasks,
        flow_archive::Kind::Audit => SegmentKind::Audit,
        flow_archive::Kind::Events => SegmentKind::Events,
        flow_archive::Kind::Firings => SegmentKind::Firings,
    }
}

fn segment(m: Manifest) -> ArchiveSegment {
    ArchiveSegment {
        segment: m.segment,
        kind: kind(m.kind),
        created_at: m.created_at,
        records: m.records,
        first_at: m.first_at,
        last_at: m.last_at,
        bytes: m.bytes,
        sha256: m.sha256,
        chain: m.chain.map(|c| ChainSpan {
            first_seq: c.first_seq,
            last_seq: c.last_seq,
            prev_hash: c.prev_hash,
            last_hash: c.last_hash,
        }),
    }
}

/// Runs a blocking read of the archive off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("the archive reader stopped: {e}"),
        )
    })?
}

impl Handle for ep::ArchiveList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let archive = history(&cx)?.archive().clone();
        blocking(move || {
            let segments = archive
                .list()
                .map_err(archive_error)?
                .into_iter()
                .map(segment)
                .filter(|s| r.kind.is_none_or(|k| k == s.kind))
                .collect();
            Ok(ArchiveListReply {
                dir: archive.dir().display().to_string(),
                segments,
            })
        })
        .await
    }
}

impl Handle for ep::ArchiveShow {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let archive = history(&cx)?.archive().clone();
        blocking(move || {
            let manifest = archive.manifest(&r.segment).map_err(archive_error)?;
            let task = match r.task {
                None => None,
                Some(task) => {
                    let id = task.to_string();
                    let found = archive
                        .records(&r.segment)
                        .map_err(archive_error)?
                        .into_iter()
                        .find_map(|mut line| {
                            let t = line.get_mut("task")?;
                            (t.get("id").and_then(Value::as_str) == Some(id.as_str()))
                                .then(|| t.take())
                        });
                    Some(found.ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::NotFound,
                            format!("task {task} is not in segment {}", r.segment),
                        )
                    })?)
                }
            };
            Ok(ArchiveShowReply {
                segment: segment(manifest),
                task,
            })
        })
        .await
    }
}

impl Handle for ep::ArchiveVerify {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let archive = history(&cx)?.archive().clone();
        blocking(move || {
            let (segments, chain_problems) = match r.segment {
                Some(name) => {
                    let manifest = archive.manifest(&name).map_err(archive_error)?;
                    let (check, _) = flow_archive::verify::segment(&archive, &manifest);
                    (vec![check], Vec::new())
                }
                None => {
                    let check = flow_archive::verify::archive(&archive).map_err(archive_error)?;
                    (check.segments, check.chain_problems)
                }
            };
            let segments: Vec<SegmentVerdict> = segments
                .into_iter()
                .map(|s| SegmentVerdict {
                    segment: s.segment,
                    records: s.records,
                    problems: s.problems,
                })
                .collect();
            Ok(ArchiveVerifyReply {
                ok: chain_problems.is_empty() && segments.iter().all(|s| s.problems.is_empty()),
                segments,
                chain_problems,
            })
        })
        .await
    }
}

impl Handle for ep::AuditVerify {
    async fn handle(cx: Cx<'_>, _r: Self::Request) -> Result<Self::Reply, ApiError> {
        let mut problems = Vec::new();
        let mut archived = 0;
        let archived_head = match cx.tasks.history.as_deref() {
            None => None,
            Some(history) => {
                let archive = history.archive().clone();
                let check = blocking(move || {
                    flow_archive::verify::archive(&archive).map_err(archive_error)
                })
                .await?;
                for s in check
                    .segments
                    .iter()
                    .filter(|s| s.kind == flow_archive::Kind::Audit)
                {
                    archived += s.records;
                    problems.extend(
                        s.problems
                            .iter()
                            .map(|p| format!("segment {}: {p}", s.segment)),
                    );
                }
                problems.extend(check.chain_problems);
                check.chain_head
            }
        };
        let live = cx.store.verify_audit_chain().await.map_err(store_error)?;
        // Where the archive ends and where the database says the last
        // export left the chain must be the same place.
        match (&archived_head, &live.exported) {
            (Some(a), Some(e)) if a != e => problems.push(format!(
                "the archive's chain ends at seal {} ({}) but the database's last export ends at seal {} ({}): a segment is missing from the archive",
                a.0, a.1, e.0, e.1
            )),
            (None, Some(e)) if cx.tasks.history.is_some() => problems.push(format!(
                "the database's last export ends at seal {} but the archive holds no audit segment",
                e.0
            )),
            _ => {}
        }
        problems.extend(live.problems);
        Ok(AuditVerifyReply {
            ok: problems.is_empty(),
            archived,
            sealed: live.sealed,
            unsealed: live.unsealed,
            head: live.head,
            problems,
        })
    }
}
