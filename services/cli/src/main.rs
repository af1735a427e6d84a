//! `flow`: the Flow command-line tool — rules (offline validation and the
//! `flow.api` service) and racks. Data goes to stdout, everything else to
//! stderr. Exit codes: 0 success, 1 invalid input or refused by the service,
//! 2 unreadable input, bad settings, usage error or no service.

mod access;
mod archive;
mod args;
mod audit;
mod bmc;
mod bundle;
mod event;
mod input;
mod out;
mod plan;
mod power;
mod remote;
mod restore;
mod rule;
mod run;
mod schedule;
mod status;
mod summary;
mod task;
mod timeline;
mod watch;

use std::process::ExitCode;

use clap::Parser;
use flow_config::Settings;

use crate::args::{Cli, Command, RuleCommand};
use crate::remote::Output;

/// How a command ended, as scripts see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Success; everything was valid.
    Valid = 0,
    /// Some input was invalid, or the service refused the request.
    Invalid = 1,
    /// Input could not be read, settings are wrong, or no service answered.
    Unusable = 2,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Output { json: cli.json };
    let settings = match Settings::from_env(cli.config.as_deref()) {
        Ok(mut s) => {
            if let Some(url) = &cli.server {
                s.nats.url = url.clone();
            }
            s
        }
        Err(e) => {
            eprintln!("flow: {e}");
            return ExitCode::from(Outcome::Unusable as u8);
        }
    };
    remote::set_actor(cli.actor.clone());
    let s = &settings;
    let outcome = match &cli.command {
        Command::Rule(RuleCommand::Validate(a)) => rule::validate(a, out),
        Command::Rule(RuleCommand::Create(a)) => rule::create(s, out, a).await,
        Command::Rule(RuleCommand::ShowBuiltin(a)) => rule::show_builtin(a),
        Command::Rule(RuleCommand::List(a)) => remote::run(remote::list(s, out, a)).await,
        Command::Rule(RuleCommand::Get(a)) => remote::run(remote::get(s, out, a)).await,
        Command::Rule(RuleCommand::Update(a)) => remote::run(remote::update(s, out, a)).await,
        Command::Rule(RuleCommand::Delete(a)) => remote::run(remote::delete(s, out, a)).await,
        Command::Rule(RuleCommand::SetDefault(a)) => {
            remote::run(remote::set_default(s, out, a)).await
        }
        Command::Rule(RuleCommand::Associate(a)) => remote::run(remote::associate(s, out, a)).await,
        Command::Rule(RuleCommand::Disassociate(a)) => {
            remote::run(remote::disassociate(s, out, a)).await
        }
        Command::Rule(RuleCommand::Resolve(a)) => remote::run(remote::resolve(s, out, a)).await,
        Command::Rule(RuleCommand::History(a)) => remote::run(remote::history(s, out, a)).await,
        Command::Rack(c) => remote::rack(s, out, c).await,
        Command::Bmc(a) => bmc::run(a, out).await,
        Command::Power(a) => task::power(s, out, a).await,
        Command::Firmware(a) => task::firmware(s, out, a).await,
        Command::Decommission(a) => task::decommission(s, out, a).await,
        Command::Task(c) => task::task(s, out, c).await,
        Command::Schedule(c) => schedule::schedule(s, out, c).await,
        Command::Run(c) => run::run(s, out, c).await,
        Command::EventRule(c) => event::event_rule(s, out, c).await,
        Command::Event(c) => event::event(s, out, c).await,
        Command::Status => status::status(s, out).await,
        Command::PowerDomain(c) => power::domain(s, out, c).await,
        Command::PowerModel(c) => power::model(s, out, c).await,
        Command::Audit(a) => audit::audit(s, out, a).await,
        Command::Access(c) => access::access(s, out, c).await,
        Command::Bundle(c) => bundle::bundle(s, out, c).await,
        Command::Admin(args::AdminCommand::Archive(c)) => archive::archive(s, out, c).await,
    };
    ExitCode::from(outcome as u8)
}
