//! Every default timeout, interval and limit of a rule, with where the number
//! comes from. Nothing else in Flow spells these numbers.

use std::time::Duration;

/// Activity start-to-close timeout when a step sets none or zero. Seed, step
/// fields: "omission or zero uses 20 minutes".
pub const ACTIVITY_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// Attempts (including the first) when a step has no `retry`. Seed, step
/// fields: "omission uses 3 attempts".
pub const RETRY_MAX_ATTEMPTS: u32 = 3;

/// First retry delay when a step has no `retry`. Seed: "1s initial interval".
pub const RETRY_INITIAL_INTERVAL: Duration = Duration::from_secs(1);

/// Backoff multiplier when a step has no `retry`. Seed: "twofold backoff".
pub const RETRY_BACKOFF_COEFFICIENT: f64 = 2.0;

/// Retry delay cap when a step has no `retry`. Seed: "1m maximum interval".
pub const RETRY_MAX_INTERVAL: Duration = Duration::from_secs(60);

/// `FirmwareControl` time between status polls. Seed, FirmwareControl:
/// "poll_interval … (default 2m)".
pub const FIRMWARE_POLL_INTERVAL: Duration = Duration::from_secs(2 * 60);

/// `FirmwareControl` maximum wait for completion. Seed, FirmwareControl:
/// "poll_timeout … (default 30m)".
pub const FIRMWARE_POLL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// `DecommissionControl` activity timeout, fixed by the executor whatever the
/// step says. Seed, DecommissionControl: "a five-minute activity timeout".
pub const DECOMMISSION_CONTROL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long one lifecycle-API call may take (each decommission status
/// call is bounded at 30 s; the lifecycle API is described in
/// `shared/redfish/src/lifecycle.rs`).
pub const LIFECYCLE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `DecommissionControl` attempts, fixed by the executor. Seed,
/// DecommissionControl: "and one attempt".
pub const DECOMMISSION_CONTROL_ATTEMPTS: u32 = 1;

/// Scheduling buffer added to every step's execution budget. Reference
/// `rules.md` §9.3: "+ 2 min (fixed scheduling buffer)".
pub const SCHEDULING_BUFFER: Duration = Duration::from_secs(2 * 60);

/// Longest rule name. Reference `rules.md` §13.1: `name varchar(128)`; Flow
/// checks it before the database does.
pub const MAX_RULE_NAME_LEN: usize = 128;
