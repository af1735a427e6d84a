//! Every default timeout, interval and limit of a rule, with where the number
//! comes from (`docs/rule-format.md`, "Defaults"). Nothing else in Flow
//! spells these numbers.

use std::time::Duration;

/// Activity start-to-close timeout when a step sets none or zero: the
/// format's step fields say "omission or zero uses 20 minutes"
/// (`docs/rule-format.md`, "Defaults").
pub const ACTIVITY_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// Attempts (including the first) when a step has no `retry`: the format's
/// step fields say "omission uses 3 attempts" (`docs/rule-format.md`,
/// "Defaults").
pub const RETRY_MAX_ATTEMPTS: u32 = 3;

/// First retry delay when a step has no `retry`: "1s initial interval"
/// (`docs/rule-format.md`, "Defaults").
pub const RETRY_INITIAL_INTERVAL: Duration = Duration::from_secs(1);

/// Backoff multiplier when a step has no `retry`: "twofold backoff"
/// (`docs/rule-format.md`, "Defaults").
pub const RETRY_BACKOFF_COEFFICIENT: f64 = 2.0;

/// Retry delay cap when a step has no `retry`: "1m maximum interval"
/// (`docs/rule-format.md`, "Defaults").
pub const RETRY_MAX_INTERVAL: Duration = Duration::from_secs(60);

/// `FirmwareControl` time between status polls: "poll_interval … (default
/// 2m)" (`docs/rule-format.md`, "FirmwareControl" and "Defaults").
pub const FIRMWARE_POLL_INTERVAL: Duration = Duration::from_secs(2 * 60);

/// `FirmwareControl` maximum wait for completion: "poll_timeout … (default
/// 30m)" (`docs/rule-format.md`, "FirmwareControl" and "Defaults").
pub const FIRMWARE_POLL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// `DecommissionControl` activity timeout, fixed by the executor whatever the
/// step says: "a five-minute activity timeout" (`docs/rule-format.md`,
/// "DecommissionControl" and "Defaults").
pub const DECOMMISSION_CONTROL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long one lifecycle-API call may take (each decommission status
/// call is bounded at 30 s; `docs/rule-format.md`, "Defaults"; the
/// lifecycle API is described in `docs/hardware.md`, "Lifecycle API", and
/// `shared/redfish/src/lifecycle.rs`).
pub const LIFECYCLE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `DecommissionControl` attempts, fixed by the executor: "and one attempt"
/// (`docs/rule-format.md`, "DecommissionControl" and "Defaults").
pub const DECOMMISSION_CONTROL_ATTEMPTS: u32 = 1;

/// Scheduling buffer added to every step's execution budget: a fixed 2 min,
/// as in the reference system (`docs/rule-format.md`, "Defaults" and "Step
/// budget").
pub const SCHEDULING_BUFFER: Duration = Duration::from_secs(2 * 60);

/// Longest rule name: the reference system's `name varchar(128)` column
/// (`docs/rule-format.md`, "Defaults"); Flow checks it before the database
/// does.
pub const MAX_RULE_NAME_LEN: usize = 128;
