//! Checking an archive: each segment against its manifest (size, digest,
//! count, every line JSON), and the audit segments as one chain, segment
//! after segment.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chain::{self, Link};
use crate::error::ArchiveError;
use crate::manifest::{Kind, Manifest};
use crate::segment::Archive;

/// What checking one segment found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentCheck {
    /// The segment.
    pub segment: String,
    /// Its kind.
    pub kind: Kind,
    /// Records read.
    pub records: u64,
    /// What is wrong (empty: it verifies).
    pub problems: Vec<String>,
}

/// What checking a whole archive found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveCheck {
    /// Each segment.
    pub segments: Vec<SegmentCheck>,
    /// Problems of the audit chain across segments (a segment missing
    /// between two others, or two claiming the same place).
    pub chain_problems: Vec<String>,
    /// Where the archived chain ends, `(last seal, its hash)`: the live
    /// log's first record must follow it.
    pub chain_head: Option<(i64, String)>,
}

impl ArchiveCheck {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.chain_problems.is_empty() && self.segments.iter().all(|s| s.problems.is_empty())
    }
}

/// Checks `manifest`'s segment; for an audit segment returns its links too.
pub fn segment(archive: &Archive, manifest: &Manifest) -> (SegmentCheck, Vec<Link>) {
    let mut check = SegmentCheck {
        segment: manifest.segment.clone(),
        kind: manifest.kind,
        records: 0,
        problems: Vec::new(),
    };
    match archive.digest(&manifest.segment) {
        Ok((bytes, sha256)) => {
            if bytes != manifest.bytes {
                check.problems.push(format!(
                    "{bytes} bytes, the manifest says {}",
                    manifest.bytes
                ));
            }
            if sha256 != manifest.sha256 {
                check.problems.push(format!(
                    "its data hashes to {sha256}, the manifest says {}",
                    manifest.sha256
                ));
            }
        }
        Err(e) => {
            check.problems.push(e.to_string());
            return (check, Vec::new());
        }
    }
    let records = match archive.records(&manifest.segment) {
        Ok(records) => records,
        Err(e) => {
            check.problems.push(e.to_string());
            return (check, Vec::new());
        }
    };
    check.records = records.len() as u64;
    if check.records != manifest.records {
        check.problems.push(format!(
            "{} records, the manifest says {}",
            check.records, manifest.records
        ));
    }
    let mut links = Vec::new();
    if manifest.kind == Kind::Audit {
        for (n, record) in records.into_iter().enumerate() {
            match to_link(record) {
                Ok(l) => links.push(l),
                Err(reason) => check.problems.push(format!("line {}: {reason}", n + 1)),
            }
        }
        match &manifest.chain {
            None => check
                .problems
                .push("an audit segment without the chain's ends in its manifest".into()),
            Some(ends) => {
                let (head, problems) = chain::check(&ends.prev_hash, &links);
                check.problems.extend(problems);
                if !links.is_empty() && head != ends.last_hash {
                    check.problems.push(format!(
                        "the chain ends at {head}, the manifest says {}",
                        ends.last_hash
                    ));
                }
                let (first, last) = (links.first().map(|l| l.seq), links.last().map(|l| l.seq));
                if first.is_some_and(|f| f != ends.first_seq)
                    || last.is_some_and(|l| l != ends.last_seq)
                {
                    check.problems.push(format!(
                        "seals {first:?}..{last:?}, the manifest says {}..{}",
                        ends.first_seq, ends.last_seq
                    ));
                }
            }
        }
    }
    (check, links)
}

fn to_link(record: Value) -> Result<Link, String> {
    let Value::Object(mut map) = record else {
        return Err("not an object".into());
    };
    let seq = map.get("seq").and_then(Value::as_i64).ok_or("no seq")?;
    let text = |map: &serde_json::Map<String, Value>, key: &str| {
        map.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(format!("no {key}"))
    };
    let prev = text(&map, "prev")?;
    let hash = text(&map, "hash")?;
    let record = map.remove("record").ok_or("no record")?;
    Ok(Link {
        seq,
        prev,
        hash,
        record,
    })
}

/// Checks every segment of `archive`, and the audit segments as one chain
/// starting at [`chain::GENESIS`].
pub fn archive(archive: &Archive) -> Result<ArchiveCheck, ArchiveError> {
    let manifests = archive.list()?;
    let mut segments = Vec::new();
    let mut audit: Vec<(&Manifest, Vec<Link>)> = Vec::new();
    for manifest in &manifests {
        let (check, links) = segment(archive, manifest);
        segments.push(check);
        if manifest.kind == Kind::Audit {
            audit.push((manifest, links));
        }
    }
    audit.sort_by_key(|(m, _)| m.chain.as_ref().map_or(i64::MAX, |c| c.first_seq));
    let mut chain_problems = Vec::new();
    let mut head: Option<(i64, String)> = None;
    for (manifest, _) in &audit {
        let Some(ends) = &manifest.chain else {
            continue;
        };
        let expected = head.as_ref().map_or(chain::GENESIS, |(_, h)| h.as_str());
        if ends.prev_hash != expected {
            chain_problems.push(format!(
                "segment {} follows {} but the archived chain before it ends at {expected} (a segment is missing or out of place)",
                manifest.segment, ends.prev_hash
            ));
        }
        head = Some((ends.last_seq, ends.last_hash.clone()));
    }
    Ok(ArchiveCheck {
        segments,
        chain_problems,
        chain_head: head,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::ChainEnds;
    use crate::segment::Span;
    use serde_json::json;
    use std::io::Write;

    fn audit_lines(from: i64, to: i64, prev: &str) -> (Vec<Value>, String) {
        let mut prev = prev.to_owned();
        let mut lines = Vec::new();
        for seq in from..=to {
            let record = json!({"id": seq, "endpoint": "task.submit"});
            let hash = chain::link(&prev, &record);
            lines.push(json!({"seq": seq, "prev": prev, "hash": hash, "record": record}));
            prev = hash;
        }
        (lines, prev)
    }

    fn write_audit(archive: &Archive, from: i64, to: i64, prev: &str) -> Manifest {
        let (lines, last) = audit_lines(from, to, prev);
        archive
            .write(
                Kind::Audit,
                &lines,
                Span {
                    chain: Some(ChainEnds {
                        version: chain::VERSION,
                        first_seq: from,
                        last_seq: to,
                        prev_hash: prev.to_owned(),
                        last_hash: last,
                    }),
                    ..Span::default()
                },
            )
            .unwrap()
    }

    #[test]
    fn an_archive_verifies_and_a_damaged_file_or_a_missing_segment_is_named() {
        let dir = std::env::temp_dir().join(format!("flow-archive-test-{}", uuid::Uuid::new_v4()));
        let archive = Archive::open(&dir).unwrap();
        let first = write_audit(&archive, 1, 3, chain::GENESIS);
        let second = write_audit(&archive, 4, 6, &first.chain.as_ref().unwrap().last_hash);
        let third = write_audit(&archive, 7, 8, &second.chain.as_ref().unwrap().last_hash);
        archive
            .write(
                Kind::Tasks,
                &[json!({"task": {}, "steps": []})],
                Span::default(),
            )
            .unwrap();
        let check = super::archive(&archive).unwrap();
        assert!(check.ok(), "{check:?}");
        assert_eq!(
            check.chain_head,
            Some((8, third.chain.clone().unwrap().last_hash))
        );

        // One byte appended to a data file: its digest and size disagree.
        let path = archive.data_path(&second.segment).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let check = super::archive(&archive).unwrap();
        assert!(!check.ok());
        let bad = check
            .segments
            .iter()
            .find(|s| s.segment == second.segment)
            .unwrap();
        assert!(
            bad.problems.iter().any(|p| p.contains("hashes to")),
            "{bad:?}"
        );

        // The middle segment gone (data and manifest): the chain says so.
        std::fs::remove_file(&path).unwrap();
        let manifest = path.with_file_name(format!("{}.manifest.json", second.segment));
        std::fs::remove_file(&manifest).unwrap();
        let check = super::archive(&archive).unwrap();
        assert_eq!(check.chain_problems.len(), 1, "{check:?}");
        assert!(
            check.chain_problems[0].contains(&third.segment),
            "{check:?}"
        );

        // A record rewritten and the file's digest fixed up in the manifest
        // too: the chain still names the record.
        let (mut lines, last) = audit_lines(1, 3, chain::GENESIS);
        lines[1]["record"]["endpoint"] = json!("task.cancel");
        let forged = archive
            .write(
                Kind::Audit,
                &lines,
                Span {
                    chain: Some(ChainEnds {
                        version: 1,
                        first_seq: 1,
                        last_seq: 3,
                        prev_hash: chain::GENESIS.into(),
                        last_hash: last,
                    }),
                    ..Span::default()
                },
            )
            .unwrap();
        let (check, _) = segment(&archive, &forged);
        assert_eq!(check.problems.len(), 1, "{check:?}");
        assert!(check.problems[0].contains("audit record 2"), "{check:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
