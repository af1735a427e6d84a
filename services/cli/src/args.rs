//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Flow: run operation rules against racks of GB200 NVL72-class hardware.
#[derive(Debug, Parser)]
#[command(name = "flow", version, about)]
pub struct Cli {
    /// Print JSON instead of tables (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// NATS URL of the Flow service; overrides FLOW_NATS_URL.
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Config file (YAML); also FLOW_CONFIG.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Who you are, for the audit log (sent as the `Flow-Actor` header; a
    /// claim, not a login). Default: the OS user ($USER).
    #[arg(long, global = true, env = "FLOW_ACTOR", value_name = "NAME")]
    pub actor: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Operation rules.
    #[command(subcommand)]
    Rule(RuleCommand),
    /// Racks and their components.
    #[command(subcommand)]
    Rack(RackCommand),
    /// Drive one BMC through Flow's managers: check reachability,
    /// credentials and behaviour before trusting it to a rule.
    Bmc(BmcArgs),
    /// Power operations on racks (one task per rack).
    Power(PowerArgs),
    /// Firmware operations on racks.
    Firmware(FirmwareArgs),
    /// Decommission racks' components.
    Decommission(TargetArgs),
    /// Tasks: list, show, watch, cancel.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Schedules: an operation fired at an interval, at cron times in a
    /// time zone, or once.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Phased rollouts: an operation over racks in phases, paused by
    /// safety gates when failures climb.
    #[command(subcommand)]
    Run(RunCommand),
    /// Event rules: what to do when the hardware reports a leak or a
    /// critical temperature.
    #[command(subcommand, name = "event-rule")]
    EventRule(EventRuleCommand),
    /// Hardware events and what their rules did.
    #[command(subcommand)]
    Event(EventCommand),
    /// The pipeline at a glance: streams, consumers, workers, tasks by status.
    Status,
    /// Power domains: budgets, the cap on shelves off, spacing between
    /// power-ons (`docs/operating-safety.md`).
    #[command(subcommand, name = "power-domain")]
    PowerDomain(PowerDomainCommand),
    /// Draw models: inrush, steady draw and settle time per component type.
    #[command(subcommand, name = "power-model")]
    PowerModel(PowerModelCommand),
    /// The audit log: who changed what, when, and how it ended (newest
    /// first).
    Audit(AuditArgs),
    /// Who may do what to which racks (verified identity mode): grants of a
    /// role over racks by name, by label, or all.
    #[command(subcommand)]
    Access(AccessCommand),
    /// Administration: the history archive.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Firmware bundles: named, versioned sets of images with sha256
    /// digests, immutable once published.
    #[command(subcommand)]
    Bundle(BundleCommand),
}

/// `flow audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the audit log's hash chain: every archived segment in order,
    /// then every live record against its seal. Exits 1 naming each break.
    Verify,
}

/// `flow admin …`.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// The history archive: segments of finished tasks' detail, audit
    /// records and schedule firings moved out of the database.
    #[command(subcommand)]
    Archive(ArchiveCommand),
}

/// `flow admin archive …`.
#[derive(Debug, Subcommand)]
pub enum ArchiveCommand {
    /// The segments, by kind then time written.
    List {
        /// Only this kind: tasks, audit, events or firings.
        #[arg(long)]
        kind: Option<String>,
    },
    /// A segment's manifest, or one archived task with its steps.
    Show {
        /// The segment (`tasks-20261207T180000Z-1a2b3c4d`).
        segment: String,
        /// Only this task's record, as `task show` showed it.
        #[arg(long)]
        task: Option<String>,
    },
    /// Check segments against their manifests (size, sha256, record count)
    /// and the audit chain across them. Exits 1 naming each problem.
    Verify {
        /// Only this segment.
        segment: Option<String>,
    },
}

/// `flow bundle …`.
#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Publish a bundle from a YAML or JSON file: `name`, `version`,
    /// `models`, and `images` (each `component_type`, `sub_target`,
    /// `version`, `url`, `digest: sha256:…`, `size`). The same contents
    /// again are the same bundle; other contents are refused.
    Publish {
        /// The bundle file.
        file: std::path::PathBuf,
    },
    /// The catalog, by name then newest first.
    List {
        /// Only bundles of this name.
        #[arg(long)]
        name: Option<String>,
        /// Retired bundles too.
        #[arg(long)]
        retired: bool,
    },
    /// One bundle and its images.
    Show {
        /// Its name.
        name: String,
        /// Its version.
        version: String,
    },
    /// Retire a bundle: kept, no longer listed by default.
    Retire {
        /// Its name.
        name: String,
        /// Its version.
        version: String,
    },
}

/// `flow access …`.
#[derive(Debug, Subcommand)]
pub enum AccessCommand {
    /// Give a verified user (`OPS/alice`) or every user of an account
    /// (`OPS/*`) a role over racks: by name (`--rack`), by label
    /// (`--label row=A`), or every rack (neither).
    Grant {
        /// `ACCOUNT/user` or `ACCOUNT/*`.
        subject: String,
        /// viewer, operator or admin.
        #[arg(long)]
        role: String,
        /// A rack by name (repeat for more).
        #[arg(long = "rack")]
        racks: Vec<String>,
        /// Racks carrying this label (repeat: all of them).
        #[arg(long = "label", value_parser = flow_protocol::labels::parse_pair)]
        labels: Vec<(String, String)>,
    },
    /// Remove a grant by its number.
    Revoke {
        /// The grant's number (`flow access list`).
        id: i64,
    },
    /// The grants, of one user (its own and its account's) or all.
    List {
        /// `ACCOUNT/user`.
        #[arg(long)]
        subject: Option<String>,
    },
    /// Would the policy let a user call an endpoint on these racks? Exits
    /// non-zero when not.
    Check {
        /// `ACCOUNT/user`.
        subject: String,
        /// An endpoint of flow.api, e.g. `task.submit`.
        endpoint: String,
        /// A rack it would touch (repeat for more).
        #[arg(long = "rack")]
        racks: Vec<String>,
    },
}

/// `flow power-domain …`.
#[derive(Debug, Subcommand)]
pub enum PowerDomainCommand {
    /// Create a domain or replace its limits (a limit not given is removed).
    Set {
        /// The domain, e.g. `row=B`.
        name: String,
        /// Its budget in kW.
        #[arg(long)]
        budget_kw: Option<f64>,
        /// Power shelves off at once, at most.
        #[arg(long)]
        max_shelves_off: Option<u32>,
        /// The least time between two power-on commands, e.g. `2s`.
        #[arg(long)]
        min_spacing: Option<String>,
    },
    /// Every domain: limits, draw counted, shelves off, waiting commands.
    List,
    /// One domain, with its racks.
    Show {
        /// The domain.
        name: String,
    },
    /// Delete a domain (racks keep naming it, without limits).
    Delete {
        /// The domain.
        name: String,
    },
    /// Set the domains a rack belongs to (none given: no domain).
    Assign {
        /// The rack (name or ID).
        rack: String,
        /// Its domains.
        domains: Vec<String>,
    },
}

/// `flow power-model …`.
#[derive(Debug, Subcommand)]
pub enum PowerModelCommand {
    /// Set the draw of a component type (for one rack model with
    /// `--rack-model`).
    Set {
        /// Compute, NVSwitch or PowerShelf.
        component_type: String,
        /// Peak draw at power-on, W.
        #[arg(long)]
        inrush_w: u32,
        /// Draw once settled, W.
        #[arg(long)]
        steady_w: u32,
        /// How long the inrush lasts, e.g. `2s`.
        #[arg(long)]
        settle: String,
        /// Only racks of this model.
        #[arg(long, default_value = "")]
        rack_model: String,
    },
    /// Every draw model.
    List,
}

/// Where a binding applies: `--site` or `--rack R`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ScopeArgs {
    /// Every rack without a rack binding.
    #[arg(long)]
    pub site: bool,
    /// One rack, by ID or name.
    #[arg(long)]
    pub rack: Option<String>,
}

/// `flow event-rule …`.
#[derive(Debug, Subcommand)]
pub enum EventRuleCommand {
    /// Create a rule from a file (YAML or JSON: name, description,
    /// event_type, actions); created disabled unless --enabled.
    Create {
        /// The rule file.
        #[arg(long)]
        file: PathBuf,
        /// Enable it at once.
        #[arg(long)]
        enabled: bool,
    },
    /// Rules, then the built-ins.
    List,
    /// One rule (`builtin:<event type>` for a built-in).
    Show {
        /// ID or name.
        rule: String,
    },
    /// Replace a rule's content at the revision read (a stale one is refused).
    Update {
        /// ID or name.
        rule: String,
        /// The new content.
        #[arg(long)]
        file: PathBuf,
        /// The revision it was read at (`flow event-rule show`).
        #[arg(long)]
        revision: i64,
    },
    /// Enable a rule.
    Enable {
        /// ID or name.
        rule: String,
    },
    /// Disable a rule (its bindings are passed over).
    Disable {
        /// ID or name.
        rule: String,
    },
    /// Delete a rule and its bindings.
    Delete {
        /// ID or name.
        rule: String,
    },
    /// Bind a rule for its event type at the site or a rack (replacing the
    /// rule bound there).
    Bind {
        /// ID or name.
        rule: String,
        /// Where.
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Remove the binding of an event type at the site or a rack.
    Unbind {
        /// `hardware.leak.detected` or `hardware.temperature.critical`.
        #[arg(long)]
        event_type: String,
        /// Where.
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Every binding.
    Bindings,
}

/// `flow event …`.
#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Events, newest first.
    List {
        /// Only this rack (name).
        #[arg(long)]
        rack: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One event: the observation, the rule chosen, each action's
    /// execution and the tasks it submitted.
    Show {
        /// The event ID.
        id: String,
    },
    /// Clear an event: its locks go (power-on, reset and firmware tasks
    /// may start on its components again); the reason is recorded with
    /// who cleared it.
    Clear {
        /// The event ID.
        id: String,
        /// Why it is safe (required), e.g. "tray dried and inspected".
        #[arg(long)]
        reason: String,
    },
}

/// `flow schedule …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule: when it fires, then the operation as on the
    /// command line, e.g. `--every 24h power restart --label row=B`.
    Create(Box<ScheduleCreateArgs>),
    /// Schedules, oldest first.
    List {
        /// Only schedules that are not paused.
        #[arg(long)]
        enabled_only: bool,
    },
    /// One schedule: its spec, windows, task request, next firing and
    /// revision.
    Get(ScheduleArg),
    /// Stop firing (no-op when paused).
    Pause(ScheduleArg),
    /// Fire again, the next time counted from now.
    Resume(ScheduleArg),
    /// Fire now, whether paused or not (ignores the overlap policy).
    Trigger(ScheduleArg),
    /// Change the name, spec, time zone, overlap or windows at a revision.
    Update(ScheduleUpdateArgs),
    /// Delete a schedule (its tasks run on).
    Delete(ScheduleArg),
    /// The firings and the tasks each created, newest first.
    History {
        /// The schedule, by ID or name.
        schedule: String,
        /// At most this many firings.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// A schedule by ID or name.
#[derive(Debug, Args)]
pub struct ScheduleArg {
    /// The schedule, by ID or name.
    pub schedule: String,
}

/// When a schedule fires: exactly one of `--every`, `--cron`, `--at`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct WhenArgs {
    /// Every so often (Go duration, at least 1s), counted from creation.
    #[arg(long)]
    pub every: Option<String>,
    /// At cron times: `minute hour day-of-month month day-of-week`, read
    /// in --timezone.
    #[arg(long)]
    pub cron: Option<String>,
    /// Once, at this time (RFC 3339; a past time fires at once).
    #[arg(long)]
    pub at: Option<String>,
}

/// What a firing does for a rack still busy with the previous firing's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverlapArg {
    /// Leave the rack out (recorded in the history).
    Skip,
    /// Submit anyway, queued behind it.
    Queue,
}

/// `flow schedule create`.
#[derive(Debug, Args)]
pub struct ScheduleCreateArgs {
    /// A unique name.
    #[arg(long)]
    pub name: String,
    /// When.
    #[command(flatten)]
    pub when: WhenArgs,
    /// The IANA time zone cron times and windows are read in.
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// For racks still busy with the previous firing's task.
    #[arg(long, value_enum, default_value_t = OverlapArg::Skip)]
    pub overlap: OverlapArg,
    /// A maintenance window its tasks may start in (repeatable):
    /// `"<cron> for <duration> [in <timezone>]"`, e.g. `"0 22 * * 1-5 for 6h"`.
    #[arg(long = "window")]
    pub windows: Vec<String>,
    /// The operation, as on the command line.
    #[command(subcommand)]
    pub operation: OperationCommand,
}

/// The operation a schedule or a run submits, as on the command line.
#[derive(Debug, Subcommand)]
pub enum OperationCommand {
    /// A power operation.
    Power(PowerArgs),
    /// A firmware operation.
    Firmware(FirmwareArgs),
    /// Decommission.
    Decommission(TargetArgs),
}

/// `flow run …`.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Create a rollout: phases, concurrency, gates, then the operation as
    /// on the command line, e.g. `--phases 1,10,50,100% --max-concurrent
    /// 20 --gate failure-rate=5% firmware upgrade --label site=lab …`.
    Create(Box<RunCreateArgs>),
    /// Runs, newest first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One run: status, phases with outcome counts, gates and the last trip.
    Show(RunArg),
    /// A run's targets by phase and order.
    Targets {
        /// The run, by ID or name.
        run: String,
        /// Only this phase (1-based).
        #[arg(long)]
        phase: Option<u32>,
    },
    /// Follow a run: a bar per phase, the gate's figure against its
    /// threshold; lines when piped. Ends when the run does.
    Watch(RunArg),
    /// Stop submitting (open tasks go on).
    Pause(RunArg),
    /// Go on after a pause (after a safety gate, accepting the failures
    /// that tripped it).
    Resume(RunArg),
    /// Start the next phase at a phase gate.
    Advance {
        /// The run, by ID or name.
        run: String,
        /// Refuse unless the run is at this phase (1-based).
        #[arg(long)]
        expect_phase: Option<u32>,
    },
    /// Cancel: skip what has not started, cancel the open tasks.
    Cancel(RunArg),
}

/// A run by ID or name.
#[derive(Debug, Args)]
pub struct RunArg {
    /// The run, by ID or name.
    pub run: String,
}

/// How a run's racks are cut into phases: exactly one.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct PhaseArgs {
    /// Cumulative shares, rising to 100: `1,10,50,100%`.
    #[arg(long)]
    pub phases: Option<String>,
    /// Phases of these many racks; the rest is a final phase: `2,20`.
    #[arg(long)]
    pub phase_counts: Option<String>,
    /// This many phases as even as can be.
    #[arg(long)]
    pub equal: Option<usize>,
}

/// `flow run create`.
#[derive(Debug, Args)]
pub struct RunCreateArgs {
    /// A unique name.
    #[arg(long)]
    pub name: String,
    /// What it is for.
    #[arg(long)]
    pub description: Option<String>,
    /// Phases.
    #[command(flatten)]
    pub phases: PhaseArgs,
    /// At most this many racks' tasks open at once.
    #[arg(long)]
    pub max_concurrent: u32,
    /// A safety gate (repeatable; any trips): `failure-rate=5%` or
    /// `failure-count=3`.
    #[arg(long = "gate", required = true)]
    pub gates: Vec<String>,
    /// What the gates count: the current phase's targets or the run's.
    #[arg(long, value_enum, default_value_t = GateScopeArg::Phase)]
    pub gate_scope: GateScopeArg,
    /// Start the next phase when one completes (else it waits for
    /// `flow run advance`).
    #[arg(long)]
    pub auto_advance: bool,
    /// `random[:seed]`, `row-by-row` or `round-robin-rows` (rows: a rack's
    /// `row` label, else its location).
    #[arg(long, default_value = "random")]
    pub order: String,
    /// A maintenance window targets may start in (repeatable):
    /// `"<cron> for <duration> [in <timezone>]"`.
    #[arg(long = "window")]
    pub windows: Vec<String>,
    /// The zone windows are read in.
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// How long a target may stay blocked by conflicting tasks before the
    /// run pauses.
    #[arg(long, default_value = "1h")]
    pub retry_timeout: String,
    /// The first wait before a blocked target is tried again (doubling).
    #[arg(long, default_value = "30s")]
    pub retry_initial: String,
    /// The longest wait between tries.
    #[arg(long, default_value = "5m")]
    pub retry_max: String,
    /// The operation, as on the command line.
    #[command(subcommand)]
    pub operation: OperationCommand,
}

/// Which targets gates count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GateScopeArg {
    /// The current phase's.
    Phase,
    /// The whole run's.
    Run,
}

/// `flow schedule update`.
#[derive(Debug, Args)]
pub struct ScheduleUpdateArgs {
    /// The schedule, by ID or name.
    pub schedule: String,
    /// The revision the change is made on (from `flow schedule get`): a
    /// schedule changed since is refused.
    #[arg(long)]
    pub revision: u64,
    /// A new name.
    #[arg(long)]
    pub name: Option<String>,
    /// A new interval.
    #[arg(long, conflicts_with_all = ["cron", "at"])]
    pub every: Option<String>,
    /// A new cron expression.
    #[arg(long, conflicts_with = "at")]
    pub cron: Option<String>,
    /// A new one-time time.
    #[arg(long)]
    pub at: Option<String>,
    /// A new time zone.
    #[arg(long)]
    pub timezone: Option<String>,
    /// A new overlap policy.
    #[arg(long, value_enum)]
    pub overlap: Option<OverlapArg>,
    /// New maintenance windows (repeatable; replaces them all).
    #[arg(long = "window", conflicts_with = "no_windows")]
    pub windows: Vec<String>,
    /// Remove the maintenance windows.
    #[arg(long)]
    pub no_windows: bool,
}

/// Which racks and components an operation targets.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("targets").required(true).multiple(true).args(["racks", "labels", "components"])))]
pub struct TargetArgs {
    /// Rack ID or name (repeatable): the whole rack, or with --component
    /// the rack a component name is looked up in.
    #[arg(long = "rack")]
    pub racks: Vec<String>,
    /// Racks carrying this label, `key=value` (repeatable: all must match).
    #[arg(long = "label", value_parser = flow_protocol::labels::parse_pair)]
    pub labels: Vec<(String, String)>,
    /// One component (repeatable): its ID, `<rack>/<name>`, or its name
    /// (in the one --rack given, or the one rack that has it).
    #[arg(long = "component")]
    pub components: Vec<String>,
    /// What the task is for (shown with it).
    #[arg(long)]
    pub description: Option<String>,
    /// Start even if targeted components are not `ready` (power and
    /// firmware tasks otherwise wait for them).
    #[arg(long)]
    pub override_readiness: bool,
    /// Why (required with --override-readiness and --allow-version-change;
    /// kept in the audit log).
    #[arg(long)]
    pub reason: Option<String>,
    /// How long a power or firmware task waits for its components to be
    /// ready before it fails naming them (Go syntax).
    #[arg(long, default_value = "30m")]
    pub readiness_timeout: String,
    /// Start no earlier than this time (RFC 3339, e.g.
    /// 2026-12-02T02:00:00Z); until then the task waits without holding its
    /// components.
    #[arg(long)]
    pub not_before: Option<String>,
    /// Fail if not started by this time (RFC 3339).
    #[arg(long)]
    pub not_after: Option<String>,
    /// Only these component types (repeatable; default all).
    #[arg(long = "type")]
    pub types: Vec<String>,
    /// Run this rule instead of resolving one.
    #[arg(long)]
    pub rule_id: Option<String>,
    /// Idempotency key (default: a fresh one).
    #[arg(long)]
    pub request_id: Option<String>,
    /// Follow the tasks until they finish, with live progress.
    #[arg(long)]
    pub wait: bool,
    /// Show what would happen on each rack — rule, steps, components,
    /// versions, every reason it would be refused or held — and create
    /// nothing (`task.plan`).
    #[arg(long, conflicts_with = "wait")]
    pub plan: bool,
    /// When a rack is busy, wait in its queue (at most 5, FIFO) instead of
    /// being refused.
    #[arg(long)]
    pub queue: bool,
    /// How long a queued task may wait (Go syntax, e.g. 30m).
    #[arg(long, requires = "queue", default_value = "1h")]
    pub timeout: String,
}

/// A power action, as operators type it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PowerAction {
    /// Graceful power-on (`power_on`).
    On,
    /// Graceful power-off (`power_off`).
    Off,
    /// `force_power_on`.
    ForceOn,
    /// `force_power_off`.
    ForceOff,
    /// `restart`.
    Restart,
    /// `force_restart`.
    ForceRestart,
    /// `warm_reset`.
    WarmReset,
    /// `cold_reset`.
    ColdReset,
}

impl PowerAction {
    /// The operation code.
    pub fn operation(self) -> flow_rules::OperationCode {
        use flow_rules::PowerOperation as P;
        flow_rules::OperationCode::Power(match self {
            PowerAction::On => P::PowerOn,
            PowerAction::Off => P::PowerOff,
            PowerAction::ForceOn => P::ForcePowerOn,
            PowerAction::ForceOff => P::ForcePowerOff,
            PowerAction::Restart => P::Restart,
            PowerAction::ForceRestart => P::ForceRestart,
            PowerAction::WarmReset => P::WarmReset,
            PowerAction::ColdReset => P::ColdReset,
        })
    }
}

/// A firmware action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FirmwareAction {
    /// `upgrade`.
    Upgrade,
    /// `downgrade`.
    Downgrade,
    /// `rollback`.
    Rollback,
    /// `restore --snapshot <task>`: bring the components of a firmware
    /// task back to the versions it recorded before it ran, from the
    /// catalog's bundles (a downgrade).
    Restore,
}

impl FirmwareAction {
    /// The operation code.
    pub fn operation(self) -> flow_rules::OperationCode {
        use flow_rules::FirmwareOperation as F;
        flow_rules::OperationCode::Firmware(match self {
            FirmwareAction::Upgrade => F::Upgrade,
            FirmwareAction::Downgrade => F::Downgrade,
            FirmwareAction::Rollback => F::Rollback,
            FirmwareAction::Restore => F::Downgrade,
        })
    }
}

/// `flow power`.
#[derive(Debug, Args)]
pub struct PowerArgs {
    /// What to do.
    #[arg(value_enum)]
    pub action: PowerAction,
    /// Use the forced variant (off → force_power_off, restart →
    /// force_restart).
    #[arg(long)]
    pub forced: bool,
    /// Targets.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `flow firmware`.
#[derive(Debug, Args)]
pub struct FirmwareArgs {
    /// What to do.
    #[arg(value_enum)]
    pub action: FirmwareAction,
    /// Image per component type: `<type>=<uri>@<version>` (repeatable;
    /// each needs its --sha256).
    #[arg(
        long = "image",
        required_unless_present_any = ["bundle", "snapshot"],
        conflicts_with_all = ["bundle", "snapshot"]
    )]
    pub images: Vec<String>,
    /// With `restore`: the firmware task whose snapshot to restore (the
    /// versions its components had before it ran); --rack names its rack,
    /// as a check of what is about to change.
    #[arg(long, conflicts_with = "bundle")]
    pub snapshot: Option<String>,
    /// The digest of each --image: `<type>=sha256:<64 hex digits>`
    /// (repeatable). BMCs are given only bytes Flow verified against it.
    #[arg(long = "sha256")]
    pub digests: Vec<String>,
    /// A published bundle, `<name>@<version>`: each type the rule flashes
    /// takes the bundle's image of that type (see `flow bundle list`).
    #[arg(long)]
    pub bundle: Option<String>,
    /// Allow an upgrade to install an older version than a component has
    /// (or a downgrade a newer one); needs --reason.
    #[arg(long)]
    pub allow_version_change: bool,
    /// Flash these firmware of a component instead of its main one:
    /// `bmc,cpld,bios,nvos` (switch trays), `pmc,psu` (power shelves);
    /// each goes to the image of the type that has it (repeatable).
    #[arg(long = "sub-target", value_delimiter = ',')]
    pub sub_targets: Vec<String>,
    /// Targets.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `flow task …`.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Recent tasks.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One task: its steps and every component's outcome (the rule it ran
    /// with --rule, or in --json).
    Show {
        /// Task ID.
        id: String,
        /// Print the snapshot of the rule the task runs, too.
        #[arg(long)]
        rule: bool,
    },
    /// Follow a task with live progress until it finishes.
    Watch {
        /// Task ID.
        id: String,
    },
    /// Cancel a task at its next action boundary.
    Cancel {
        /// Task ID.
        id: String,
    },
}

/// `flow bmc`.
#[derive(Debug, Args)]
pub struct BmcArgs {
    /// The BMC's base URL, e.g. https://10.0.0.17.
    pub url: String,
    /// User name (with --password-env).
    #[arg(long, requires = "password_env", conflicts_with = "credential")]
    pub user: Option<String>,
    /// Environment variable holding the password (never a flag: flags show in `ps`).
    #[arg(long, requires = "user")]
    pub password_env: Option<String>,
    /// Credential reference from the credentials file (FLOW_BMC_CREDENTIALS_FILE).
    #[arg(long)]
    pub credential: Option<String>,
    /// Credentials file (YAML: reference → user and password_env/password_file).
    #[arg(long, env = "FLOW_BMC_CREDENTIALS_FILE")]
    pub credentials_file: Option<PathBuf>,
    /// What the BMC manages.
    #[arg(long, value_enum, default_value_t = BmcKind::Compute)]
    pub kind: BmcKind,
    /// Extra CA certificates (PEM) to trust.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification (labs only).
    #[arg(long)]
    pub insecure: bool,
    /// What to do.
    #[command(subcommand)]
    pub action: BmcAction,
}

/// The kind of component behind a BMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BmcKind {
    /// A compute tray.
    Compute,
    /// An NVLink switch tray.
    Nvswitch,
    /// A power shelf.
    Powershelf,
}

/// `flow bmc <url> …` actions.
#[derive(Debug, Subcommand)]
pub enum BmcAction {
    /// Print what Flow finds at the BMC: service root, systems, chassis,
    /// reset types, update service, session support, events, and which
    /// simulator profile it resembles.
    Probe,
    /// Read the power state.
    PowerStatus,
    /// Send a power operation (power_on, force_power_off, restart, …).
    Power {
        /// The operation code.
        operation: String,
    },
    /// Read the firmware inventory.
    FirmwareStatus,
    /// Start a firmware update and follow it to the end.
    FirmwareUpdate {
        /// Image URI the BMC fetches.
        image_uri: String,
        /// The version the image installs (an update to it is skipped when installed).
        #[arg(long)]
        version: Option<String>,
        /// Inventory member to update (repeatable; default: the main firmware).
        #[arg(long = "target")]
        targets: Vec<String>,
        /// Give up following after this many seconds.
        #[arg(long, default_value_t = 3600)]
        wait_seconds: u64,
    },
}

/// `flow rule …`.
#[derive(Debug, Subcommand)]
pub enum RuleCommand {
    /// Validate rule files offline: a JSON rule definition or a YAML batch.
    /// Exit 0 when all are valid, 1 when any is invalid, 2 when any cannot be read.
    Validate(ValidateArgs),
    /// Create a rule (--name … --rule-file) or a batch (--from-yaml).
    Create(CreateArgs),
    /// Print the built-in rule of an operation as a JSON rule definition.
    ShowBuiltin(ShowBuiltinArgs),
    /// List rules, newest first.
    List(ListArgs),
    /// Show one rule with its definition and rack bindings.
    Get(IdArg),
    /// Change a rule's name, description or definition (a new revision).
    Update(UpdateArgs),
    /// Delete a rule (one bound to racks only with --force).
    Delete(DeleteArgs),
    /// Make a rule the default for its operation (moves the default).
    SetDefault(SetDefaultArgs),
    /// Bind a rule to a rack for the rule's operation.
    Associate(AssociateArgs),
    /// Remove a rack's rule binding for an operation.
    Disassociate(DisassociateArgs),
    /// Which rule a task would run for a rack and operation, and why.
    Resolve(ResolveArgs),
    /// Every saved definition of a rule.
    History(IdArg),
}

/// `flow rack …`.
#[derive(Debug, Subcommand)]
pub enum RackCommand {
    /// Create a rack and its components from a rack document.
    Create(RackCreateArgs),
    /// List racks.
    List(RackListArgs),
    /// Show a rack, its components and rule bindings.
    Get(RackArg),
    /// Delete a rack with its components and bindings.
    Delete(RackArg),
    /// Set labels (`key=value`) and remove them (`key-`).
    Label(RackLabelArgs),
    /// Set components' status: ready, in-use or maintenance (power and
    /// firmware tasks wait for components that are not ready).
    ComponentStatus(ComponentStatusArgs),
    /// Each component's power as Flow knows it: observed state and age,
    /// measured draw, how it counts against power budgets, desired state,
    /// any held command.
    Power(RackArg),
}

/// `flow rack component-status`.
#[derive(Debug, Args)]
pub struct ComponentStatusArgs {
    /// ready, in-use or maintenance.
    pub status: String,
    /// Components: IDs, `<rack>/<name>`, or names (in --rack, or in the one
    /// rack that has them).
    #[arg(required = true)]
    pub components: Vec<String>,
    /// The rack bare component names are in.
    #[arg(long)]
    pub rack: Option<String>,
}

/// `flow rack list`.
#[derive(Debug, Args)]
pub struct RackListArgs {
    /// Only racks carrying this label, `key=value` (repeatable: all must
    /// match).
    #[arg(long = "label", value_parser = flow_protocol::labels::parse_pair)]
    pub labels: Vec<(String, String)>,
}

/// `flow rack label`.
#[derive(Debug, Args)]
pub struct RackLabelArgs {
    /// The rack ID or name.
    pub rack: String,
    /// `key=value` sets a label, `key-` removes one.
    #[arg(required = true)]
    pub changes: Vec<String>,
}

/// `flow rule validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Rule files: `.json` (a definition `{"version", "steps"}`), `.yaml`/`.yml`
    /// (a batch with `rules:`, or a definition).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Also check each definition against this operation, as `rule create`
    /// does (a batch's rules are checked against their own operations).
    #[arg(long)]
    pub operation: Option<String>,
}

/// `flow rule create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Rule name (single-rule mode).
    #[arg(long, conflicts_with = "from_yaml", requires_all = ["operation_type", "operation", "rule_file"])]
    pub name: Option<String>,
    /// Rule description (single-rule mode).
    #[arg(long, conflicts_with = "from_yaml")]
    pub description: Option<String>,
    /// power_control, firmware_control or decommission (single-rule mode).
    #[arg(long, conflicts_with = "from_yaml", requires = "name")]
    pub operation_type: Option<String>,
    /// The operation code, e.g. power_on (single-rule mode).
    #[arg(long, conflicts_with = "from_yaml", requires = "name")]
    pub operation: Option<String>,
    /// JSON rule definition file (single-rule mode).
    #[arg(long, conflicts_with = "from_yaml", requires = "name")]
    pub rule_file: Option<PathBuf>,
    /// Make the rule the default for its operation; refused if one exists.
    #[arg(long, conflicts_with = "from_yaml")]
    pub is_default: bool,
    /// YAML batch file (batch mode): every rule becomes its operation's default.
    #[arg(long, required_unless_present = "name")]
    pub from_yaml: Option<PathBuf>,
    /// Replace existing rules for the same operations, as new revisions that
    /// keep their rack bindings (batch mode; one transaction).
    #[arg(long, requires = "from_yaml", conflicts_with = "dry_run")]
    pub overwrite: bool,
    /// Validate only; contact no server.
    #[arg(long)]
    pub dry_run: bool,
}

/// `flow rule show-builtin`.
#[derive(Debug, Args)]
pub struct ShowBuiltinArgs {
    /// The operation code, e.g. power_on, force_restart, upgrade, decommission.
    pub operation: String,
}

/// `flow rule list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this operation type.
    #[arg(long)]
    pub operation_type: Option<String>,
    /// Only this operation.
    #[arg(long)]
    pub operation: Option<String>,
    /// Only default rules.
    #[arg(long)]
    pub default_only: bool,
    /// Skip this many.
    #[arg(long, default_value_t = 0)]
    pub offset: u32,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}

/// A rule ID.
#[derive(Debug, Args)]
pub struct IdArg {
    /// The rule ID.
    pub id: String,
}

/// `flow rule update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The rule ID.
    pub id: String,
    /// New name.
    #[arg(long)]
    pub name: Option<String>,
    /// New description.
    #[arg(long)]
    pub description: Option<String>,
    /// New JSON rule definition file.
    #[arg(long)]
    pub rule_file: Option<PathBuf>,
}

/// `flow rule delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The rule ID.
    pub id: String,
    /// Also remove its rack bindings.
    #[arg(long)]
    pub force: bool,
}

/// `flow rule set-default`.
#[derive(Debug, Args)]
pub struct SetDefaultArgs {
    /// The rule ID.
    #[arg(long)]
    pub id: String,
}

/// `flow rule associate`.
#[derive(Debug, Args)]
pub struct AssociateArgs {
    /// The rack, by ID or name.
    #[arg(long)]
    pub rack_id: String,
    /// The rule ID.
    #[arg(long)]
    pub rule_id: String,
}

/// `flow rule disassociate`.
#[derive(Debug, Args)]
pub struct DisassociateArgs {
    /// The rack, by ID or name.
    #[arg(long)]
    pub rack_id: String,
    /// The operation type (optional: the code implies it).
    #[arg(long)]
    pub operation_type: Option<String>,
    /// The operation code.
    #[arg(long)]
    pub operation: String,
}

/// `flow rule resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The rack, by ID or name.
    #[arg(long)]
    pub rack: String,
    /// The operation code.
    #[arg(long)]
    pub operation: String,
    /// An explicit rule, as a task request may name one.
    #[arg(long)]
    pub rule_id: Option<String>,
}

/// `flow rack create`.
#[derive(Debug, Args)]
pub struct RackCreateArgs {
    /// Rack document (JSON): name, manufacturer, model, serial, location, components.
    #[arg(long)]
    pub from_json: PathBuf,
}

/// A rack by ID or name.
#[derive(Debug, Args)]
pub struct RackArg {
    /// The rack ID or name.
    pub rack: String,
}

/// `flow audit`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    /// `flow audit verify`; without it, the records.
    #[command(subcommand)]
    pub command: Option<AuditCommand>,
    /// Only records since this: a duration back from now (`1h`, `30m`,
    /// Go syntax) or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Only records before this RFC 3339 time.
    #[arg(long)]
    pub until: Option<String>,
    /// Only records naming this rack.
    #[arg(long)]
    pub rack: Option<String>,
    /// Only records of this actor.
    #[arg(long = "user")]
    pub user: Option<String>,
    /// Only this endpoint (`task.submit`).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Only this outcome: ok, refused or error.
    #[arg(long)]
    pub outcome: Option<String>,
    /// At most this many (1 to 1000).
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}
