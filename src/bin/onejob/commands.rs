//! What each command does.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use onejob::app::{self, Application, Role};
use onejob::config::Settings;
use onejob::domain::{KeyRole, OwnerId};
use onejob::keys;

use crate::args::{BenchArgs, Command, HotRequest, KeysCommand, ProvidersCommand, ServeArgs};

pub(crate) type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// Runs one command to its end.
pub(crate) async fn run(command: Command, config: Option<&Path>) -> Result<(), AnyError> {
    // Which configuration a command reads, said before it reads it: a
    // command given none reads the built-in one, with its SQLite file in the
    // working directory, whatever the server runs with.
    match &command {
        Command::Serve(_) | Command::Worker | Command::Sim { .. } => {
            tracing::info!("reading {}", which_configuration(config))
        }
        Command::Purge { .. } | Command::Migrate | Command::Keys { .. } | Command::Providers { .. } => {
            eprintln!("onejob: reading {}", which_configuration(config))
        }
        Command::Bench(_) | Command::BenchSql { .. } | Command::Probe { .. } | Command::Config { .. } => {}
    }
    match command {
        Command::Serve(args) => serve(args, config).await,
        Command::Worker => work(config).await,
        Command::Sim { listen } => simulate(listen, config).await,
        Command::Purge { dry_run } => purge(dry_run, config).await,
        Command::Migrate => migrate(config).await,
        Command::Keys { command } => manage_keys(command, config).await,
        Command::Providers { command } => manage_providers(command, config).await,
        Command::Bench(args) => bench(args).await,
        Command::BenchSql { statement } => print_bench_sql(statement),
        Command::Probe { url } => probe(&url).await,
        Command::Config { .. } => unreachable!("handled before telemetry starts"),
    }
}

/// Serves the API (and, unless told not to, runs a worker) until a signal.
async fn serve(args: ServeArgs, config: Option<&Path>) -> Result<(), AnyError> {
    let ServeArgs { listen, no_migrate, no_worker, allow_remote } = args;
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
    // The first run's key is made beside serving: nothing holds the
    // listener back. A check that fails for another reason than a database
    // briefly away (one never migrated) stops the server, as it would have
    // stopped its start.
    let (failed, mut first_run_failed) = tokio::sync::watch::channel(None::<String>);
    let first_run = application.local_addr().map(|addr| {
        tracing::info!(address = %addr, "listening on http://{addr}");
        let keys = application.state().keys.clone();
        tokio::spawn(async move {
            if let Err(error) = first_run_key(keys, addr).await {
                let _ = failed.send(Some(error));
            }
        })
    });
    let failure = first_run_failed.clone();
    let stop = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            // A sender dropped (the check is done) disables this branch.
            Ok(_) = first_run_failed.wait_for(Option::is_some) => {}
        }
    };
    application.run_until(stop).await?;
    if let Some(first_run) = first_run {
        first_run.abort();
    }
    if let Some(error) = failure.borrow().clone() {
        return Err(format!("cannot check for the first run's key: {error}").into());
    }
    tracing::info!("stopped");
    Ok(())
}

/// Runs a worker until a signal.
async fn work(config: Option<&Path>) -> Result<(), AnyError> {
    let settings = Settings::load(config)?;
    let application = Application::build_as(settings, Role::Worker).await?;
    application.run_until(shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Runs the provider simulator until a signal.
async fn simulate(listen: SocketAddr, config: Option<&Path>) -> Result<(), AnyError> {
    let settings = load_checked(config)?;
    let simulator = onejob::provider::sim::spawn(&settings, listen).await?;
    tracing::info!(address = %simulator.addr, "simulator listening on http://{}", simulator.addr);
    shutdown_signal().await;
    Ok(())
}

/// Purges what retention allows now, batch after batch, or says what it would.
async fn purge(dry_run: bool, config: Option<&Path>) -> Result<(), AnyError> {
    let settings = load_checked(config)?;
    let store = app::open_migrated_store(&settings).await?;
    let catalog = onejob::task::catalog::Catalog::new(&settings)?;
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
    let files = onejob::files::Files::of(&settings.files, settings.database.url())?;
    let pace = onejob::worker::PurgePace::UntilEmpty;
    let (by_rule, ending) =
        onejob::worker::purge_due(&store, &catalog, &settings.retention, &files, pace, || false).await;
    for (rule, purged) in &by_rule {
        println!("{}: {purged} finished jobs purged", which(rule));
    }
    match ending {
        onejob::worker::PurgeEnding::Busy => Err("another process is purging; try again later".into()),
        onejob::worker::PurgeEnding::Failed(error) => Err(error.into()),
        onejob::worker::PurgeEnding::Done | onejob::worker::PurgeEnding::Stopped => Ok(()),
    }
}

/// Applies the pending migrations.
async fn migrate(config: Option<&Path>) -> Result<(), AnyError> {
    let settings = load_checked(config)?;
    let store = app::open_store(&settings)?;
    store.check_session_pooling().await?;
    store.migrate().await?;
    tracing::info!("migrations applied");
    Ok(())
}

/// Creates, limits, revokes or lists API keys.
async fn manage_keys(command: KeysCommand, config: Option<&Path>) -> Result<(), AnyError> {
    let settings = load_checked(config)?;
    let store = app::open_migrated_store(&settings).await?;
    match command {
        KeysCommand::Create { owner, role, max_in_flight } => {
            let owner = OwnerId::parse(&owner)?;
            let role: KeyRole = role.parse()?;
            let (id, token) = keys::create_key_with_role(&store, &owner, role).await?;
            if max_in_flight.is_some() {
                store.set_key_max_in_flight(id, max_in_flight).await?;
            }
            println!("created {role} API key {id} for owner {owner}; the token is shown once:");
            println!("{token}");
        }
        KeysCommand::SetMaxInFlight { id, max_in_flight } => {
            let limit = match max_in_flight.as_str() {
                "none" => None,
                n => Some(n.parse::<u32>().ok().filter(|&n| n > 0).ok_or("max_in_flight must be at least 1, or none")?),
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
            if !store.revoke_api_key(id, None).await? {
                return Err(format!("no live API key with id {id}").into());
            }
            println!("revoked API key {id}");
        }
        KeysCommand::List { owner } => {
            let owner = owner.map(|o| OwnerId::parse(&o)).transpose()?;
            for key in store.list_api_keys(owner.as_ref()).await? {
                let revoked = key.revoked_at.map(|at| format!(" revoked {at}")).unwrap_or_default();
                let limit = key.max_in_flight.map(|n| format!(" max_in_flight {n}")).unwrap_or_default();
                println!("{} {} {} created {}{}{}", key.id, key.owner, key.role, key.created_at, limit, revoked);
            }
        }
    }
    Ok(())
}

/// Qualifies a provider now, or lists where each stands.
async fn manage_providers(command: ProvidersCommand, config: Option<&Path>) -> Result<(), AnyError> {
    let settings = Settings::load(config)?;
    let store = app::open_migrated_store(&settings).await?;
    warn_of_names_it_lacks(&store, &settings).await?;
    let catalog = std::sync::Arc::new(onejob::task::catalog::Catalog::new(&settings)?);
    match command {
        ProvidersCommand::Qualify { name, task } => {
            let (providers, _simulator) = app::start_providers(&settings).await?;
            let record = onejob::task::qualify::qualify(&store, &providers, &catalog, &name, &task).await?;
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

/// Drives a running onejob with load and prints the report.
async fn bench(args: BenchArgs) -> Result<(), AnyError> {
    let BenchArgs { url, token, scenario, connections, duration, jobs, provider, timeout, server_pid, sim_url, json } =
        args;
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
        sim_url,
    };
    let report = onejob_bench::run(options).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", onejob_bench::table(&report));
    }
    Ok(())
}

/// Prints the Postgres statement of a hot request.
fn print_bench_sql(statement: HotRequest) -> Result<(), AnyError> {
    use onejob::store::postgres::HotStatement;
    let statement = match statement {
        HotRequest::Create => HotStatement::Create,
        HotRequest::Poll => HotStatement::Poll,
    };
    println!("{};", statement.sql());
    Ok(())
}

/// Exits 0 when `url` answers 2xx within 3 s.
async fn probe(url: &str) -> Result<(), AnyError> {
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(3)).build()?;
    let status = client.get(url).send().await?.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}").into());
    }
    Ok(())
}

/// Which configuration a command given `path` reads, in words.
fn which_configuration(path: Option<&Path>) -> String {
    match path {
        Some(path) => format!("the configuration in {}", path.display()),
        None => "the built-in configuration (no --config nor ONEJOB_CONFIG; `onejob config print-default` prints it)"
            .to_owned(),
    }
}

/// Warns on standard error when the database has qualifications of
/// providers or tasks that `settings` lacks: the command most likely reads
/// another configuration than the server's.
async fn warn_of_names_it_lacks(store: &onejob::store::Store, settings: &Settings) -> Result<(), AnyError> {
    let pairs = store.list_qualified_pairs().await?;
    let mut providers: Vec<&str> =
        pairs.iter().map(|(provider, _)| provider.as_str()).filter(|p| !settings.providers.contains_key(*p)).collect();
    let mut tasks: Vec<&str> =
        pairs.iter().map(|(_, task)| task.as_str()).filter(|t| !settings.tasks.contains_key(*t)).collect();
    for names in [&mut providers, &mut tasks] {
        names.sort_unstable();
        names.dedup();
    }
    let mut lacking = Vec::new();
    if !providers.is_empty() {
        lacking.push(format!("providers ({})", providers.join(", ")));
    }
    if !tasks.is_empty() {
        lacking.push(format!("tasks ({})", tasks.join(", ")));
    }
    if !lacking.is_empty() {
        eprintln!(
            "onejob: warning: the database knows {} that this configuration lacks: is it the one the server \
             runs? Pass that one with --config",
            lacking.join(" and ")
        );
    }
    Ok(())
}

/// The settings, with the tasks' schemas and templates compiled to check
/// them (for the commands that build no application, which would).
fn load_checked(path: Option<&Path>) -> Result<Settings, AnyError> {
    let settings = Settings::load(path)?;
    onejob::task::catalog::Catalog::new(&settings)?;
    Ok(settings)
}

/// On a database that never had its first run and has no API key, makes an
/// admin key for owner `demo` (see [`keys::create_first_run_key`]) and shows
/// it once on standard error, written there directly and never as a log
/// event, with a request to try. Of replicas starting together on an empty
/// database, one makes and shows it; the database decides which. A database
/// that is only busy or briefly away is asked again until it answers, with
/// a line in the log every 30 seconds.
async fn first_run_key(keys: Arc<keys::Keys>, addr: SocketAddr) -> Result<(), String> {
    let mut warned_at: Option<tokio::time::Instant> = None;
    let made = loop {
        match keys.create_first_run_key().await {
            Err(error) if error.is_unavailable() => {
                if warned_at.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(30)) {
                    tracing::warn!(%error, "cannot yet check for the first run's key; trying again");
                    warned_at = Some(tokio::time::Instant::now());
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(error) => return Err(error.to_string()),
            Ok(made) => break made,
        }
    };
    let Some((_, token)) = made else {
        tracing::info!("no first-run key made: the database has API keys, or had its first run before");
        return Ok(());
    };
    let owner = keys::FIRST_RUN_OWNER;
    eprintln!(
        "\nNo API key existed, so an operator key was made for owner \"{owner}\". It is shown once, here, and never again; \
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
