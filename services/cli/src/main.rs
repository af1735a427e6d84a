//! `flow`: the Flow command-line tool. This build has the offline rule
//! commands: `flow rule validate`, `flow rule create --dry-run` and
//! `flow rule show-builtin`. Data goes to stdout, everything else to stderr;
//! exit codes: 0 valid, 1 invalid, 2 unreadable input or usage error.

mod args;
mod input;
mod rule;
mod summary;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command, RuleCommand};

/// How a command ended, as scripts see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Everything was valid.
    Valid = 0,
    /// Some input was invalid.
    Invalid = 1,
    /// Some input could not be read, or the command cannot run.
    Unusable = 2,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Rule(RuleCommand::Validate(a)) => rule::validate(&a),
        Command::Rule(RuleCommand::Create(a)) => rule::create(&a),
        Command::Rule(RuleCommand::ShowBuiltin(a)) => rule::show_builtin(&a),
    };
    ExitCode::from(outcome as u8)
}
