//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Flow: run operation rules against racks of GB200 NVL72-class hardware.
#[derive(Debug, Parser)]
#[command(name = "flow", version, about)]
pub struct Cli {
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
}

/// `flow rule …`.
#[derive(Debug, Subcommand)]
pub enum RuleCommand {
    /// Validate rule files offline: a JSON rule definition or a YAML batch.
    /// Exit 0 when all are valid, 1 when any is invalid, 2 when any cannot be read.
    Validate(ValidateArgs),
    /// Create a rule (--name … --rule-file) or a batch (--from-yaml). This
    /// build validates offline only: use --dry-run.
    Create(CreateArgs),
    /// Print the built-in rule of an operation as a JSON rule definition.
    ShowBuiltin(ShowBuiltinArgs),
}

/// `flow rule validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Rule files: `.json` (a definition `{"version", "steps"}`), `.yaml`/`.yml`
    /// (a batch with `rules:`, or a definition).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print one JSON object per file instead of text.
    #[arg(long)]
    pub json: bool,
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
    /// Make the rule the default for its operation (single-rule mode).
    #[arg(long, conflicts_with = "from_yaml")]
    pub is_default: bool,
    /// YAML batch file (batch mode): every rule becomes its operation's default.
    #[arg(long, required_unless_present = "name")]
    pub from_yaml: Option<PathBuf>,
    /// Replace existing rules for the same operations (batch mode).
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
