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

/// mimalloc rather than the system allocator: a request allocates and frees
/// many small buffers across threads, which glibc's malloc serves with
/// more CPU (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Its arenas committed as they are used, not whole when reserved:
/// eagerly committed, they held a fifth more resident memory at a peak of
/// 10,000 jobs in flight. Set before anything runs (`.preinit_array`): set
/// at the start of `main`, the option had no effect on that peak, the
/// arena that serves the process being reserved by then. (Elsewhere than
/// Linux, the arenas are committed whole.)
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".preinit_array")]
static ALLOCATOR_OPTIONS: extern "C" fn() = allocator_options;

#[cfg(target_os = "linux")]
extern "C" fn allocator_options() {
    /// `mi_option_arena_eager_commit` in the mimalloc.h of
    /// libmimalloc-sys 0.1.49 (mimalloc 3), the version Cargo.toml pins.
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    // SAFETY: sets one of the allocator's options to a valid value; it
    // allocates nothing.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) };
}

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
