//! The `onejob` command: serve the API, apply migrations, manage API keys,
//! print the default configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use onejob::app::{self, Application, Role};
use onejob::config::{DEFAULT_CONFIG, Settings};
use onejob::domain::{KeyRole, OwnerId};
use onejob::{keys, telemetry};

#[derive(Parser)]
#[command(name = "onejob", version, about = "One job per intent: idempotent jobs, guarded attempts, one winner.")]
struct Cli {
    /// What to do; `serve` when left out.
    #[command(subcommand)]
    command: Option<Command>,
    /// `serve`'s flags, for `onejob` with no command.
    #[command(flatten)]
    serve: ServeArgs,
    /// The configuration file (TOML); the built-in default without one.
    #[arg(long, short, global = true, env = "ONEJOB_CONFIG")]
    config: Option<PathBuf>,
    /// How log lines look.
    #[arg(long, global = true, value_enum, env = "ONEJOB_LOG_FORMAT", default_value = "pretty")]
    log_format: telemetry::LogFormat,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Do not apply migrations at start.
    #[arg(long)]
    no_migrate: bool,
    /// Serve the API only; run workers with `onejob worker`.
    #[arg(long)]
    no_worker: bool,
    /// Allow listening on an address other than loopback.
    #[arg(long)]
    allow_remote: bool,
}

impl ServeArgs {
    /// Whether any flag was given.
    fn any_given(&self) -> bool {
        self.listen.is_some() || self.no_migrate || self.no_worker || self.allow_remote
    }
}

#[derive(Subcommand)]
enum Command {
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
    Bench {
        /// The server.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// An API token.
        #[arg(long, env = "ONEJOB_TOKEN")]
        token: String,
        /// What to measure.
        #[arg(value_enum)]
        scenario: onejob_bench::Scenario,
        /// Concurrent keep-alive connections.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Seconds the timed scenarios run.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// `inflight`, `streams`: how many jobs (`streams`: one stream each).
        #[arg(long, default_value_t = 1000)]
        jobs: usize,
        /// `inflight`, `streams`: on which provider.
        #[arg(long, default_value = "sim-slow")]
        provider: String,
        /// `streams`: seconds to wait for every stream to end; one still
        /// open then is an error.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// `inflight`: the server's process id, to report its peak memory.
        #[arg(long)]
        server_pid: Option<u32>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
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
enum HotRequest {
    /// `POST /jobs` with a new key.
    Create,
    /// `GET /jobs/{id}`.
    Poll,
}

#[derive(Subcommand)]
enum ProvidersCommand {
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
enum KeysCommand {
    /// Create a key; the token is printed once, alone on the last line.
    Create {
        /// The owner (tenant) the key authenticates as.
        #[arg(long)]
        owner: String,
        /// `client` (its owner's jobs) or `admin` (also providers,
        /// qualifications, keys, its owner's webhooks, and any owner's unknown attempts).
        #[arg(long, default_value = "client", value_parser = ["client", "admin"])]
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
enum ConfigCommand {
    /// Print the built-in configuration, to copy and edit.
    PrintDefault,
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
    match run(command, cli.config.as_deref()).await {
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

type AnyError = Box<dyn std::error::Error + Send + Sync>;

async fn run(command: Command, config: Option<&Path>) -> Result<(), AnyError> {
    match command {
        Command::Serve(ServeArgs { listen, no_migrate, no_worker, allow_remote }) => {
            let mut settings = Settings::load(config)?;
            if let Some(listen) = listen {
                settings.server.listen = listen;
            }
            if !settings.server.listen.ip().is_loopback() && !allow_remote {
                return Err(format!(
                    "refusing to listen on {} without --allow-remote: onejob binds loopback unless told otherwise",
                    settings.server.listen
                )
                .into());
            }
            if no_migrate {
                settings.database.migrate_on_start = false;
            }
            let role = if no_worker || !settings.worker.enabled { Role::Api } else { Role::All };
            let application = Application::build_as(settings, role).await?;
            if let Some(addr) = application.local_addr() {
                tracing::info!(address = %addr, "listening on http://{addr}");
                first_run_key(&application.state().keys, addr).await?;
            }
            application.run_until(shutdown_signal()).await?;
            tracing::info!("stopped");
            Ok(())
        }
        Command::Worker => {
            let settings = Settings::load(config)?;
            let application = Application::build_as(settings, Role::Worker).await?;
            application.run_until(shutdown_signal()).await?;
            tracing::info!("stopped");
            Ok(())
        }
        Command::Sim { listen } => {
            let settings = load_checked(config)?;
            let simulator = onejob::sim::spawn(&settings, listen).await?;
            tracing::info!(address = %simulator.addr, "simulator listening on http://{}", simulator.addr);
            shutdown_signal().await;
            Ok(())
        }
        Command::Purge { dry_run } => {
            let settings = load_checked(config)?;
            let store = app::open_migrated_store(&settings).await?;
            let catalog = onejob::catalog::Catalog::new(&settings)?;
            let which = |rule: &onejob::store::retention::PurgeRule| match &rule.task {
                Some(task) => format!("task {task}"),
                None if rule.others.is_empty() => "every task".to_owned(),
                None => format!("every task but {}", rule.others.join(", ")),
            };
            if dry_run {
                for rule in onejob::worker::purge_rules(&catalog, &settings.retention) {
                    let count = store.count_purgeable(&rule).await?;
                    let before = rule.before.to_rfc3339();
                    println!("{}: {count} finished jobs unchanged since {before} would be purged", which(&rule));
                }
                return Ok(());
            }
            let (by_rule, ending) = onejob::worker::purge_due(
                store.as_ref(),
                &catalog,
                &settings.retention,
                onejob::worker::PurgePace::UntilEmpty,
                || false,
            )
            .await;
            for (rule, purged) in &by_rule {
                println!("{}: {purged} finished jobs purged", which(rule));
            }
            match ending {
                onejob::worker::PurgeEnding::Busy => Err("another process is purging; try again later".into()),
                onejob::worker::PurgeEnding::Failed(error) => Err(error.into()),
                onejob::worker::PurgeEnding::Done | onejob::worker::PurgeEnding::Stopped => Ok(()),
            }
        }
        Command::Migrate => {
            let settings = load_checked(config)?;
            let store = app::open_store(&settings)?;
            store.check_session_pooling().await?;
            store.migrate().await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Keys { command } => {
            let settings = load_checked(config)?;
            let store = app::open_migrated_store(&settings).await?;
            match command {
                KeysCommand::Create { owner, role, max_in_flight } => {
                    let owner = OwnerId::parse(&owner)?;
                    let role: KeyRole = role.parse()?;
                    let (id, token) = keys::create_key_with_role(store.as_ref(), &owner, role).await?;
                    if max_in_flight.is_some() {
                        store.set_key_max_in_flight(id, max_in_flight).await?;
                    }
                    println!("created {role} API key {id} for owner {owner}; the token is shown once:");
                    println!("{token}");
                }
                KeysCommand::SetMaxInFlight { id, max_in_flight } => {
                    let limit = match max_in_flight.as_str() {
                        "none" => None,
                        n => Some(
                            n.parse::<u32>()
                                .ok()
                                .filter(|&n| n > 0)
                                .ok_or("max_in_flight must be at least 1, or none")?,
                        ),
                    };
                    if !store.set_key_max_in_flight(id, limit).await? {
                        return Err(format!("no live API key with id {id}").into());
                    }
                    println!(
                        "API key {id}: max_in_flight {}",
                        limit.map_or("none (the configured default)".to_owned(), |n| n.to_string())
                    );
                }
                KeysCommand::Revoke { id } => {
                    if !store.revoke_api_key(id).await? {
                        return Err(format!("no live API key with id {id}").into());
                    }
                    println!("revoked API key {id}");
                }
                KeysCommand::List { owner } => {
                    let owner = owner.map(|o| OwnerId::parse(&o)).transpose()?;
                    for key in store.list_api_keys(owner.as_ref()).await? {
                        let revoked = key.revoked_at.map(|at| format!(" revoked {at}")).unwrap_or_default();
                        let limit = key.max_in_flight.map(|n| format!(" max_in_flight {n}")).unwrap_or_default();
                        println!(
                            "{} {} {} created {}{}{}",
                            key.id, key.owner, key.role, key.created_at, limit, revoked
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Providers { command } => {
            let settings = Settings::load(config)?;
            let store = app::open_migrated_store(&settings).await?;
            let catalog = std::sync::Arc::new(onejob::catalog::Catalog::new(&settings)?);
            match command {
                ProvidersCommand::Qualify { name, task } => {
                    let (providers, _simulator) = app::start_providers(&settings).await?;
                    let record = onejob::qualify::qualify(store.as_ref(), &providers, &catalog, &name, &task).await?;
                    println!("{}", serde_json::to_string_pretty(&record.report)?);
                    println!(
                        "provider {name} {} qualification for task {task} (contract sha256:{})",
                        if record.passed { "passed" } else { "failed" },
                        hex::encode(record.contract_hash)
                    );
                    if !record.passed {
                        return Err("qualification failed".into());
                    }
                }
                ProvidersCommand::List => {
                    let mut names: Vec<&String> = settings.providers.keys().collect();
                    names.sort();
                    for name in names {
                        for task in catalog.tasks() {
                            let Some(hash) = catalog.contract_hash(&task.name, name) else { continue };
                            let state = store.qualification_state(name, &task.name, &hash).await?;
                            let why = state.refusal(name, &task.name).unwrap_or_default();
                            println!("{name}\t{}\t{}\t{why}", task.name, state.name());
                        }
                    }
                }
            }
            Ok(())
        }
        Command::Bench { url, token, scenario, connections, duration, jobs, provider, timeout, server_pid, json } => {
            let options = onejob_bench::Options {
                url: url.trim_end_matches('/').to_owned(),
                token,
                scenario,
                connections,
                duration: std::time::Duration::from_secs(duration),
                jobs,
                provider,
                timeout: std::time::Duration::from_secs(timeout),
                server_pid,
            };
            let report = onejob_bench::run(options).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{}", onejob_bench::table(&report));
            }
            Ok(())
        }
        Command::BenchSql { statement } => {
            use onejob::store::postgres::HotStatement;
            let statement = match statement {
                HotRequest::Create => HotStatement::Create,
                HotRequest::Poll => HotStatement::Poll,
            };
            println!("{};", statement.sql());
            Ok(())
        }
        Command::Probe { url } => {
            let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(3)).build()?;
            let status = client.get(&url).send().await?.status();
            if !status.is_success() {
                return Err(format!("{url} answered {status}").into());
            }
            Ok(())
        }
        Command::Config { .. } => unreachable!("handled before telemetry starts"),
    }
}

/// The settings, with the tasks' schemas and templates compiled to check
/// them (for the commands that build no application, which would).
fn load_checked(path: Option<&Path>) -> Result<Settings, AnyError> {
    let settings = Settings::load(path)?;
    onejob::catalog::Catalog::new(&settings)?;
    Ok(settings)
}

/// On a database that never had its first run and has no API key, makes an
/// admin key for owner `demo` (see [`keys::create_first_run_key`]) and shows
/// it once on standard error, written there directly and never as a log
/// event, with a request to try. Of replicas starting together on an empty
/// database, one makes and shows it; the database decides which.
async fn first_run_key(keys: &keys::Keys, addr: SocketAddr) -> Result<(), AnyError> {
    // At start the pool may be briefly exhausted (the qualifications at
    // start, the worker's loops, a loaded machine): a database that is only
    // busy must not stop the server. Give it 30 seconds.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let made = loop {
        match keys.create_first_run_key().await {
            Err(error) if error.is_unavailable() && tokio::time::Instant::now() < deadline => {
                tracing::warn!(%error, "cannot yet check for the first run's key; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            answer => break answer?,
        }
    };
    let Some((_, token)) = made else {
        tracing::info!("no first-run key made: the database has API keys, or had its first run before");
        return Ok(());
    };
    let owner = keys::FIRST_RUN_OWNER;
    eprintln!(
        "\nNo API key existed, so an admin key was made for owner \"{owner}\". It is shown once, here, and never again; \
         only its SHA-256 is stored:\n\n\
         {token}\n\nTry it:\n\n\
         curl -s http://{addr}/jobs -H 'Authorization: Bearer {token}' -H 'Idempotency-Key: first-job' \\\n  \
         -H 'Content-Type: application/json' -d '{{\"task\": \"summarize\", \"input\": {{\"text\": \"one job per intent\"}}}}'\n"
    );
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    tracing::info!("shutting down: finishing requests in flight");
}
