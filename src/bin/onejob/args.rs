//! The command line: what each command and flag means.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use onejob::process::telemetry;

#[derive(Parser)]
#[command(name = "onejob", version, about = "One job per intent: idempotent jobs, guarded attempts, one winner.")]
pub(crate) struct Cli {
    /// What to do; `serve` when left out.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// `serve`'s flags, for `onejob` with no command.
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
    /// The configuration file (TOML); the built-in default without one.
    #[arg(long, short, global = true, env = "ONEJOB_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// How log lines look.
    #[arg(long, global = true, value_enum, env = "ONEJOB_LOG_FORMAT", default_value = "pretty")]
    pub(crate) log_format: telemetry::LogFormat,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// Do not apply migrations at start.
    #[arg(long)]
    pub(crate) no_migrate: bool,
    /// Serve the API only; run workers with `onejob worker`.
    #[arg(long)]
    pub(crate) no_worker: bool,
    /// Allow listening on an address other than loopback.
    #[arg(long)]
    pub(crate) allow_remote: bool,
}

impl ServeArgs {
    /// Whether any flag was given.
    pub(crate) fn any_given(&self) -> bool {
        self.listen.is_some() || self.no_migrate || self.no_worker || self.allow_remote
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve the HTTP API (what `onejob` with no command does).
    Serve(ServeArgs),
    /// Run a worker only: claim, call providers, reap, reconcile.
    Worker,
    /// Run the provider simulator standalone.
    Sim {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: SocketAddr,
    },
    /// Purge the finished jobs past their retention now (the worker does it
    /// every `retention.purge_interval`), then exit.
    Purge {
        /// Say how many jobs would go, by rule, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Apply pending database migrations, then exit.
    Migrate,
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Ask a running onejob whether it is ready (`/readyz`): exit 0 if it
    /// answers 2xx within 3 s. For container health checks.
    Probe {
        /// The URL to ask.
        #[arg(default_value = "http://127.0.0.1:8080/readyz")]
        url: String,
    },
    /// Drive a running onejob with load and report throughput and latency.
    Bench(BenchArgs),
    /// Print the SQL statement the Postgres store runs for a scenario's
    /// request (`create`: a new job; `poll`: reading one), with its `$n`
    /// parameters, for running it under pgbench (bench/ceiling.sh).
    BenchSql {
        /// Which request.
        #[arg(value_enum)]
        statement: HotRequest,
    },
    /// Providers and their qualifications.
    Providers {
        #[command(subcommand)]
        command: ProvidersCommand,
    },
}

/// The requests whose statement `bench-sql` prints.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum HotRequest {
    /// `POST /jobs` with a new key.
    Create,
    /// `GET /jobs/{id}`.
    Poll,
}

#[derive(Subcommand)]
pub(crate) enum ProvidersCommand {
    /// Qualify a provider against a task's contract now; prints the report
    /// and exits non-zero when it fails.
    Qualify {
        /// The provider.
        name: String,
        /// The task whose contract it must meet.
        #[arg(long)]
        task: String,
    },
    /// Where every provider stands for every task.
    List,
}

#[derive(Subcommand)]
pub(crate) enum KeysCommand {
    /// Create a key; the token is printed once, alone on the last line.
    Create {
        /// The owner (tenant) the key authenticates as.
        #[arg(long)]
        owner: String,
        /// `client` (its owner's jobs), `admin` (also its own owner's
        /// webhooks and keys), or `operator` (an admin that also reaches
        /// every owner: their unknown attempts, the dashboard, any key,
        /// providers and qualifications).
        #[arg(long, default_value = "client", value_parser = ["client", "admin", "operator"])]
        role: String,
        /// Its owner's attempts running at once across the cluster, instead
        /// of `[worker] max_in_flight_per_owner` (with several keys setting
        /// one, the largest holds).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        max_in_flight: Option<u32>,
    },
    /// Set or clear (`none`) a live key's limit of its owner's attempts
    /// running at once; running workers apply it at their next claim.
    SetMaxInFlight {
        /// The key's id.
        id: uuid::Uuid,
        /// At least 1, or `none`.
        max_in_flight: String,
    },
    /// Revoke a key by its id; every running server stops accepting it when
    /// the revocation commits.
    Revoke {
        /// The key's id, as `keys create` and `keys list` print it.
        id: uuid::Uuid,
    },
    /// List keys (ids, owners, roles, never tokens).
    List {
        /// Only this owner's keys.
        #[arg(long)]
        owner: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the built-in configuration, to copy and edit.
    PrintDefault,
}

/// `bench`'s flags.
#[derive(Args)]
pub(crate) struct BenchArgs {
    /// The server.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub(crate) url: String,
    /// An API token, or several separated by commas: the connections of
    /// `create`, `e2e` and `e2e-poll` take them in turn, to spread the load
    /// over their owners.
    #[arg(long, env = "ONEJOB_TOKEN")]
    pub(crate) token: String,
    /// What to measure.
    #[arg(value_enum)]
    pub(crate) scenario: onejob_bench::Scenario,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 64)]
    pub(crate) connections: usize,
    /// Seconds the timed scenarios run.
    #[arg(long, default_value_t = 10)]
    pub(crate) duration: u64,
    /// `inflight`, `streams`: how many jobs (`streams`: one stream each).
    #[arg(long, default_value_t = 1000)]
    pub(crate) jobs: usize,
    /// `inflight`, `streams`, `tokens`: on which provider.
    #[arg(long, default_value = "sim-slow")]
    pub(crate) provider: String,
    /// `streams`: seconds to wait for every stream to end; one still
    /// open then is an error.
    #[arg(long, default_value_t = 120)]
    pub(crate) timeout: u64,
    /// `inflight`, `tokens`: the server's process id, to report its peak memory.
    #[arg(long)]
    pub(crate) server_pid: Option<u32>,
    /// `tokens`: the simulator's address, such as `http://127.0.0.1:19090`.
    #[arg(long)]
    pub(crate) sim_url: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}
