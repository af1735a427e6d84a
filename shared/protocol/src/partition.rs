//! Job partitions: every step job of a rack travels on one of
//! [`JOB_PARTITIONS`] subjects (`flow.jobs.<partition>.<type>`), each with
//! its own durable consumer (`flow-workers-<partition>`), so that one
//! worker runs a rack's jobs one after the other and keeps its BMC
//! sessions, discovered resources and connections
//! (`docs/architecture.md`, "Rack affinity"). Which worker pulls which
//! partition is decided by the workers themselves from the members of the
//! `flow_workers` bucket; the partition of a rack is a pure function of its
//! name, the same in every scheduler version that uses it.

/// How many partitions the job stream has: at most this many workers get
/// jobs of their own (more workers share none of the load until one
/// leaves). Changing it moves racks between partitions: jobs already
/// published stay where they are and are still pulled.
pub const JOB_PARTITIONS: u16 = 32;

/// The KV bucket in which each worker keeps a key alive while it runs
/// (`w.<worker>`), and each hardware watcher (`v.<watcher>`); the workers
/// divide the partitions among themselves, and so do the watchers.
pub const BUCKET_WORKERS: &str = "flow_workers";
/// The prefix of a worker's key in [`BUCKET_WORKERS`].
pub const WORKER_KEY_PREFIX: &str = "w.";
/// The prefix of a hardware watcher's key in [`BUCKET_WORKERS`].
pub const WATCHER_KEY_PREFIX: &str = "v.";

/// A job partition, `0..JOB_PARTITIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition(u16);

impl Partition {
    /// Every partition, in order.
    pub fn all() -> impl Iterator<Item = Partition> {
        (0..JOB_PARTITIONS).map(Partition)
    }

    /// The partition of a rack's jobs: FNV-1a (64 bit) of its name, modulo
    /// [`JOB_PARTITIONS`]. Stable across versions and processes (never
    /// Rust's randomly seeded hasher).
    pub fn of_rack(rack: &str) -> Partition {
        let hash = fnv1a(rack.as_bytes());
        Partition((hash % u64::from(JOB_PARTITIONS)) as u16)
    }

    /// Its index.
    pub fn index(self) -> u16 {
        self.0
    }

    /// The durable consumer of its jobs.
    pub fn consumer(self) -> String {
        format!("{}-{:02}", crate::jobs::CONSUMER_WORKERS, self.0)
    }

    /// Its consumer's filter (`flow.jobs.<partition>.>`).
    pub fn filter(self) -> String {
        format!("{}{:02}.>", crate::jobs::JOB_SUBJECT_PREFIX, self.0)
    }

    /// The subject of its jobs of one component type.
    pub fn subject(self, type_token: &str) -> String {
        format!(
            "{}{:02}.{type_token}",
            crate::jobs::JOB_SUBJECT_PREFIX,
            self.0
        )
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}", self.0)
    }
}

/// FNV-1a, 64 bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The filter of the consumer that drains jobs published before
/// partitions existed (`flow.jobs.<type>`, one token after `flow.jobs`):
/// it overlaps no partition's filter, and every worker pulls it.
pub const UNPARTITIONED_FILTER: &str = "flow.jobs.*";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_racks_partition_is_fixed_and_in_range() {
        // Fixed values: a change of the hash would move every rack.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let p = Partition::of_rack("rack-0001");
        assert_eq!(p, Partition::of_rack("rack-0001"));
        assert!(p.index() < JOB_PARTITIONS);
    }

    #[test]
    fn racks_spread_over_every_partition() {
        let mut counts = [0u32; JOB_PARTITIONS as usize];
        for i in 0..1000 {
            counts[Partition::of_rack(&format!("rack-{i:04}")).index() as usize] += 1;
        }
        // 1,000 racks over 32 partitions: ~31 each; none empty or doubled.
        assert!(counts.iter().all(|&c| (12..=60).contains(&c)), "{counts:?}");
    }

    #[test]
    fn names_and_filters() {
        let p = Partition::of_rack("r1");
        assert_eq!(p.consumer(), format!("flow-workers-{p}"));
        assert_eq!(p.filter(), format!("flow.jobs.{p}.>"));
        assert_eq!(p.subject("compute"), format!("flow.jobs.{p}.compute"));
        assert_eq!(Partition::all().count(), JOB_PARTITIONS as usize);
        // The unpartitioned consumer's filter matches `flow.jobs.<type>`
        // only: one token, where a partition's subjects have two.
        assert_eq!(UNPARTITIONED_FILTER.split('.').count(), 3);
        assert_eq!(p.subject("compute").split('.').count(), 4);
    }
}
