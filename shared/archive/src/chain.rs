//! The audit log's hash chain. Each record's hash is
//! `sha256(prev_hash "\n" canonical(record))`, written `sha256:<hex>`; the
//! first record's `prev_hash` is [`GENESIS`]. A record changed after it was
//! sealed no longer hashes to its seal; one removed leaves its successor's
//! `prev_hash` pointing at nothing; the chain says which.
//!
//! The record hashed is the fixed shape of chain [`VERSION`] the store
//! builds (shared/store/src/history/audit.rs): columns added to the audit
//! log later are not in it, so a seal stays checkable by every release.

use ring::digest::{SHA256, digest};
use serde_json::Value;

/// The version of the hashed record's shape.
pub const VERSION: u32 = 1;

/// The `prev_hash` of the first record ever sealed.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The hash of `record` following `prev`.
pub fn link(prev: &str, record: &Value) -> String {
    let mut text = String::with_capacity(prev.len() + 256);
    text.push_str(prev);
    text.push('\n');
    text.push_str(&crate::canonical::to_string(record));
    spell(digest(&SHA256, text.as_bytes()).as_ref())
}

/// `sha256:<hex>` of a digest.
pub fn spell(digest: &[u8]) -> String {
    let mut out = String::with_capacity(7 + digest.len() * 2);
    out.push_str("sha256:");
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// One link of a chain as it is checked: a record, its seal's sequence
/// number and hashes.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The seal's sequence number (increasing along the chain).
    pub seq: i64,
    /// The hash the seal says came before.
    pub prev: String,
    /// The seal's hash of the record.
    pub hash: String,
    /// The record (the chain version's shape).
    pub record: Value,
}

/// Walks `links` in order from `expected_prev`; each problem names the seal.
/// Returns the last hash (the one the next link must follow) and the problems.
pub fn check<'a>(
    expected_prev: &str,
    links: impl IntoIterator<Item = &'a Link>,
) -> (String, Vec<String>) {
    let mut prev = expected_prev.to_owned();
    let mut last_seq = i64::MIN;
    let mut problems = Vec::new();
    for l in links {
        if l.seq <= last_seq {
            problems.push(format!(
                "seal {}: out of order after seal {last_seq}",
                l.seq
            ));
        }
        last_seq = l.seq;
        if l.prev != prev {
            problems.push(format!(
                "seal {}: follows {} but the chain before it ends at {prev} (a record was removed or reordered)",
                l.seq, l.prev
            ));
        }
        let hash = link(&l.prev, &l.record);
        if hash != l.hash {
            let id = l.record.get("id").map(Value::to_string).unwrap_or_default();
            problems.push(format!(
                "seal {} (audit record {id}): the record hashes to {hash}, sealed as {} (the record was changed)",
                l.seq, l.hash
            ));
        }
        prev = l.hash.clone();
    }
    (prev, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chain(n: i64) -> Vec<Link> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|seq| {
                let record = json!({"id": seq, "actor": "OPS/alice", "outcome": "ok"});
                let hash = link(&prev, &record);
                let l = Link {
                    seq,
                    prev: prev.clone(),
                    hash: hash.clone(),
                    record,
                };
                prev = hash;
                l
            })
            .collect()
    }

    #[test]
    fn an_intact_chain_checks_and_each_kind_of_tampering_is_named() {
        let links = chain(4);
        let (head, problems) = check(GENESIS, &links);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(head, links[3].hash);

        let mut changed = links.clone();
        changed[1].record["actor"] = json!("OPS/mallory");
        let (_, problems) = check(GENESIS, &changed);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("seal 2 (audit record 2)"),
            "{problems:?}"
        );
        assert!(problems[0].contains("was changed"), "{problems:?}");

        let mut removed = links.clone();
        removed.remove(2);
        let (_, problems) = check(GENESIS, &removed);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("seal 4: follows"), "{problems:?}");

        // A chain resumed from the wrong place (an archive segment missing).
        let (_, problems) = check(GENESIS, &links[2..]);
        assert!(problems[0].starts_with("seal 3: follows"), "{problems:?}");
    }
}
