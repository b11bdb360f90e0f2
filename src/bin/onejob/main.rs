//! The `onejob` command: serve the API, run a worker or the simulator,
//! apply migrations, purge, manage API keys and providers, print the
//! default configuration. The commands' flags are in `args.rs`, what each
//! does in `commands.rs`.

mod args;
mod commands;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use onejob::config::DEFAULT_CONFIG;
use onejob::process::telemetry;

use args::{Cli, Command, ConfigCommand};

#[tokio::main]
async fn main() -> ExitCode {
    // Failpoints from FAILPOINTS, in a build with the `failpoints` feature
    // (the tests'); nothing otherwise.
    let _failpoints = fail::FailScenario::setup();
    let cli = Cli::parse();
    let command = match cli.command {
        None => Command::Serve(cli.serve),
        Some(_) if cli.serve.any_given() => {
            let message = "serve's flags go after `serve`, or with no command at all";
            Cli::command().error(clap::error::ErrorKind::ArgumentConflict, message).exit()
        }
        Some(command) => command,
    };
    if let Command::Config { command: ConfigCommand::PrintDefault } = command {
        print!("{DEFAULT_CONFIG}");
        return ExitCode::SUCCESS;
    }
    let _telemetry = telemetry::init(cli.log_format);
    match commands::run(command, cli.config.as_deref()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Once: as a log event where logs are collected as JSON, as a
            // plain line for a person otherwise.
            match cli.log_format {
                telemetry::LogFormat::Json => tracing::error!("{error}"),
                telemetry::LogFormat::Pretty => eprintln!("error: {error}"),
            }
            ExitCode::FAILURE
        }
    }
}
