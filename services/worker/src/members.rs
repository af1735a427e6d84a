//! Which job partitions this worker pulls: every worker keeps a key alive
//! in the `flow_workers` bucket, watches everyone's, and takes the
//! partitions that [`assign`] gives it among the workers it has heard from
//! lately. All workers compute the same division from the same members, so
//! each partition — and so each rack — has one worker
//! (`docs/architecture.md`, "Rack affinity").
//!
//! Hardware watchers (`flow-worker --watch`) divide the same partitions
//! among themselves the same way, as a [`Group`] of their own in the same
//! bucket: a watcher watches the BMCs of the racks in its partitions
//! (`crate::watch`), so each BMC has one watcher and a dead watcher's
//! racks move to the others within [`GONE_AFTER`].
//!
//! The division is a placement hint, not a lock: while the members' views
//! differ (a worker joined or vanished in the last few seconds) a partition
//! may be pulled by two workers, which JetStream already allows, or by
//! none, until the views agree again ([`GONE_AFTER`] at the most).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::kv;
use flow_protocol::partition::{JOB_PARTITIONS, Partition, fnv1a};
use flow_telemetry::ErrorChain;
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often a worker refreshes its key.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// A member not heard from for this long is gone: its partitions go to the
/// others. A worker that stops deletes its key, and is gone at once.
pub const GONE_AFTER: Duration = Duration::from_secs(4);
/// The pause before a watch that ended is opened again.
const REWATCH_AFTER: Duration = Duration::from_secs(1);

/// Who divides the partitions among themselves: each group has its own
/// keys in the bucket and its own division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Workers pulling the job partitions' consumers.
    Workers,
    /// Hardware watchers watching the BMCs of the partitions' racks.
    Watchers,
}

impl Group {
    /// The prefix of its members' keys.
    pub const fn prefix(self) -> &'static str {
        match self {
            Group::Workers => flow_protocol::partition::WORKER_KEY_PREFIX,
            Group::Watchers => flow_protocol::partition::WATCHER_KEY_PREFIX,
        }
    }

    /// What its members are called in the log.
    const fn noun(self) -> &'static str {
        match self {
            Group::Workers => "worker",
            Group::Watchers => "watcher",
        }
    }

    /// A member's key in the bucket.
    fn key(self, member: &str) -> String {
        format!("{}{member}", self.prefix())
    }
}

/// The weight of `worker` for `partition` (rendezvous hashing): FNV-1a of
/// both, mixed so that close inputs land far apart.
fn weight(worker: &str, partition: Partition) -> u64 {
    let mut bytes = Vec::with_capacity(worker.len() + 2);
    bytes.extend_from_slice(worker.as_bytes());
    bytes.extend_from_slice(&partition.index().to_be_bytes());
    // splitmix64's finaliser.
    let mut z = fnv1a(&bytes);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The partitions of `me` when `members` are running (`me` among them or
/// not: a worker always counts itself). Each partition goes to the member
/// with the highest [`weight`] that has fewer than its fair share (the
/// partitions divided by the members, rounded up): the same for every
/// member that sees the same set, balanced within one partition, and when
/// a member comes or goes, most partitions stay where they were.
pub fn assign(me: &str, members: &BTreeSet<String>) -> BTreeSet<Partition> {
    let mut all: Vec<&str> = members.iter().map(String::as_str).collect();
    if !members.contains(me) {
        all.push(me);
    }
    let fair = usize::from(JOB_PARTITIONS).div_ceil(all.len());
    let mut load: BTreeMap<&str, usize> = all.iter().map(|m| (*m, 0)).collect();
    let mut mine = BTreeSet::new();
    for partition in Partition::all() {
        let mut ranked = all.clone();
        ranked.sort_by_key(|m| std::cmp::Reverse((weight(m, partition), *m)));
        let owner = ranked.into_iter().find(|m| load[m] < fair).unwrap_or(me);
        *load.entry(owner).or_default() += 1;
        if owner == me {
            mine.insert(partition);
        }
    }
    mine
}

/// The members of one group heard from, and when.
#[derive(Debug)]
struct Seen {
    group: Group,
    at: BTreeMap<String, Instant>,
}

impl Seen {
    /// Those heard from within [`GONE_AFTER`] of `now`.
    fn new(group: Group) -> Self {
        Seen {
            group,
            at: BTreeMap::new(),
        }
    }

    fn live(&self, now: Instant) -> BTreeSet<String> {
        self.at
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) < GONE_AFTER)
            .map(|(m, _)| m.clone())
            .collect()
    }

    fn apply(&mut self, entry: &kv::Entry, now: Instant) {
        let Some(member) = entry.key.strip_prefix(self.group.prefix()) else {
            return;
        };
        match entry.operation {
            kv::Operation::Put => {
                self.at.insert(member.to_owned(), now);
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                self.at.remove(member);
            }
        }
    }
}

/// Keeps `me`'s key in `group` alive and `owned` up to date until `stop`;
/// then deletes the key, so that the others take its partitions at once.
pub(crate) async fn run(
    bucket: kv::Store,
    group: Group,
    me: String,
    owned: watch::Sender<BTreeSet<Partition>>,
    seen_gauge: prometheus_client::metrics::gauge::Gauge,
    stop: CancellationToken,
) {
    let mut seen = Seen::new(group);
    let mut refresh = tokio::time::interval(REFRESH_EVERY);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watcher = None;
    let mut rewatch_at = Instant::now();
    // The first division waits until this worker's own key comes back on
    // the watch (everyone's older keys came before it), or GONE_AFTER when
    // the watch shows nothing: then it counts itself alone.
    let started = Instant::now();
    let publish = |seen: &Seen| {
        if !seen.at.contains_key(&me) && started.elapsed() < GONE_AFTER {
            return;
        }
        let mut live = seen.live(Instant::now());
        live.insert(me.clone());
        seen_gauge.set(i64::try_from(live.len()).unwrap_or(i64::MAX));
        let mine = assign(&me, &live);
        owned.send_if_modified(|current| {
            if *current == mine {
                return false;
            }
            tracing::info!(
                member = %me,
                group = group.noun(),
                partitions = mine.len(),
                first = ?mine.first().map(|p| p.index()),
                "partitions of this member"
            );
            *current = mine;
            true
        });
    };
    loop {
        if watcher.is_none() && Instant::now() >= rewatch_at {
            match bucket.watch_all().await {
                Ok(w) => watcher = Some(w),
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "cannot watch the workers bucket");
                    rewatch_at = Instant::now() + REWATCH_AFTER;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            _ = refresh.tick() => {
                if let Err(error) = bucket.put(group.key(&me), Vec::new().into()).await {
                    tracing::warn!(error = %ErrorChain(&error), group = group.noun(), "cannot refresh this member's key");
                }
                publish(&seen);
            }
            entry = async {
                match watcher.as_mut() {
                    Some(w) => w.next().await,
                    None => std::future::pending().await,
                }
            } => match entry {
                Some(Ok(entry)) => {
                    seen.apply(&entry, Instant::now());
                    publish(&seen);
                }
                Some(Err(error)) => {
                    tracing::warn!(error = %ErrorChain(&error), "workers bucket watch failed");
                    watcher = None;
                    rewatch_at = Instant::now() + REWATCH_AFTER;
                }
                None => {
                    watcher = None;
                    rewatch_at = Instant::now() + REWATCH_AFTER;
                }
            },
        }
    }
    if let Err(error) = bucket.delete(group.key(&me)).await {
        tracing::warn!(error = %ErrorChain(&error), group = group.noun(), "cannot delete this member's key");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> BTreeSet<String> {
        (0..n).map(|i| format!("worker-{i}")).collect()
    }

    #[test]
    fn every_partition_has_exactly_one_owner_and_the_load_is_fair() {
        for n in 1..=40 {
            let all = members(n);
            let mut owners = BTreeMap::new();
            for m in &all {
                for p in assign(m, &all) {
                    assert!(owners.insert(p, m.clone()).is_none(), "{p} twice with {n}");
                }
            }
            assert_eq!(owners.len(), usize::from(JOB_PARTITIONS), "{n} members");
            let fair = usize::from(JOB_PARTITIONS).div_ceil(n);
            for m in &all {
                assert!(assign(m, &all).len() <= fair, "{m} over {fair} with {n}");
            }
        }
    }

    #[test]
    fn a_worker_alone_takes_everything_even_before_it_sees_itself() {
        assert_eq!(
            assign("w", &BTreeSet::new()).len(),
            usize::from(JOB_PARTITIONS)
        );
    }

    #[test]
    fn a_member_leaving_moves_little_more_than_its_own_partitions() {
        let four = members(4);
        let mut three = four.clone();
        three.remove("worker-3");
        let mut moved = 0;
        for m in &three {
            let before = assign(m, &four);
            let after = assign(m, &three);
            assert!(
                after.is_superset(&before) || before.difference(&after).count() <= 2,
                "{m}: {before:?} -> {after:?}"
            );
            moved += before.symmetric_difference(&after).count();
        }
        let gone = assign("worker-3", &four).len();
        // Its partitions move; a few others may, to keep the load fair.
        assert!(moved <= gone + 6, "{moved} moved, {gone} were the leaver's");
    }

    #[test]
    fn members_not_heard_from_are_gone() {
        let now = Instant::now();
        let mut seen = Seen::new(Group::Workers);
        seen.at.insert("old".into(), now);
        seen.at.insert("new".into(), now + GONE_AFTER);
        let live = seen.live(now + GONE_AFTER + Duration::from_millis(1));
        assert_eq!(live, BTreeSet::from(["new".to_owned()]));
    }
}
