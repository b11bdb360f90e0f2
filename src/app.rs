//! Building the application: settings in; the store, the providers (and the
//! in-process simulator when they need one), the API listener and the worker
//! out. `main` and the tests build it the same way, the tests on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{ProviderKind, Settings};
use crate::http;
use crate::jobs::Jobs;
use crate::keys::Authenticator;
use crate::process::signals::Signals;
use crate::provider::sim::{self, RunningSimulator};
use crate::provider::{self, Providers};
use crate::state::AppState;
use crate::store::postgres::{PostgresOptions, PostgresStore};
use crate::store::sqlite::{SqliteOptions, SqliteStore};
use crate::store::{Store, StoreError};
use crate::sync::AbortOnDrop;
use crate::task::catalog::Catalog;
use crate::worker::Worker;

mod database;

/// Why the application cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The URL's scheme names no supported database.
    #[error("unsupported database URL scheme '{0}': use postgres:// or sqlite://")]
    UnsupportedDatabase(String),
    /// The store failed (connecting, migrating).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The providers could not be set up.
    #[error("providers: {0}")]
    Providers(String),
    /// A command that uses the database found none, or one without
    /// onejob's tables.
    #[error(
        "{0}: run `onejob migrate` first (`onejob serve` also applies the migrations when it starts), \
         or set DATABASE_URL to the database your server uses"
    )]
    NotMigrated(String),
    /// A task's schema or template does not compile.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// Opens the store the settings name: Postgres for `postgres://`, SQLite
/// for `sqlite://` (the default, a file in the working directory).
pub fn open_store(settings: &Settings) -> Result<Store, StartError> {
    let url = settings.database.url();
    let database = &settings.database;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let options = PostgresOptions {
            max_connections: database.max_connections,
            acquire_timeout: database.acquire_timeout,
            statement_timeout: database.statement_timeout,
        };
        Ok(Store::new(PostgresStore::connect_lazy(url, &options)?))
    } else if url.starts_with("sqlite:") {
        let options = SqliteOptions {
            max_connections: database.max_connections,
            busy_timeout: database.sqlite_busy_timeout,
            acquire_timeout: database.acquire_timeout,
        };
        Ok(Store::new(SqliteStore::connect_lazy(url, &options)?))
    } else {
        let scheme = url.split(':').next().unwrap_or(url);
        Err(StartError::UnsupportedDatabase(scheme.to_owned()))
    }
}

/// Opens the store for a command that uses the database without migrating
/// it (`keys`, `providers`, `purge`): a SQLite file that does not exist is
/// not created, and a database without every migration is refused, saying
/// what to run.
pub async fn open_migrated_store(settings: &Settings) -> Result<Store, StartError> {
    let url = settings.database.url();
    if url.starts_with("sqlite:") && !SqliteStore::file_exists(url)? {
        return Err(StartError::NotMigrated(format!("there is no database at {url}")));
    }
    let store = open_store(settings)?;
    match store.check_ready().await {
        Ok(()) => Ok(store),
        Err(StoreError::NotMigrated { applied: 0, .. }) => {
            Err(StartError::NotMigrated("the database has none of onejob's tables".to_owned()))
        }
        Err(error @ StoreError::NotMigrated { .. }) => Err(StartError::NotMigrated(error.to_string())),
        Err(error) => Err(error.into()),
    }
}

/// Which parts a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The API and the worker (`onejob serve`).
    All,
    /// The API only (`onejob serve --no-worker`).
    Api,
    /// The worker only (`onejob worker`).
    Worker,
}

/// A built application, bound and ready to run.
pub struct Application {
    listener: Option<TcpListener>,
    state: AppState,
    worker: Option<Arc<Worker>>,
    qualifying: Option<tokio::task::JoinHandle<()>>,
    shutdown_grace: Duration,
    // Kept alive as long as the application; it serves the `sim` providers.
    _simulator: Option<RunningSimulator>,
    // Stopped with the application: it keeps the key cache honest.
    _key_follower: Option<AbortOnDrop>,
    // Stopped with the application: it forgets owners the rate limiter no
    // longer needs to remember.
    _limiter_sweep: Option<AbortOnDrop>,
    // Stopped with the application: it keeps this process's view of the
    // providers' breakers current, when any provider has one.
    _breaker_refresh: Option<AbortOnDrop>,
    // Stopped with the application: it reads whether the database's commits
    // wait for a standby, every minute.
    _replication_follower: AbortOnDrop,
    // Stopped with the application: it folds histogram samples into their
    // buckets whether or not anyone scrapes `/metrics`.
    _metrics_upkeep: AbortOnDrop,
}

/// Every minute, forgets the owners whose rate-limit bucket is full again
/// (what the limiter would start them with): it keeps one entry per owner
/// seen lately, not per owner ever seen.
async fn sweep_limiter(limiter: Arc<governor::DefaultKeyedRateLimiter<crate::domain::OwnerId>>) {
    let mut minutes = tokio::time::interval(Duration::from_secs(60));
    loop {
        minutes.tick().await;
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }
}

/// Starts applying the store's key changes to the authenticator's cache,
/// when the store can push them. Waits briefly for the follower's first
/// word, so that a server caches keys from its first request on; without it
/// (the database is down) keys are looked up every time until it comes.
async fn follow_key_changes(store: &Store, auth: &Arc<Authenticator>, jobs: &Arc<Jobs>) -> Option<AbortOnDrop> {
    let mut changes = store.follow_key_changes()?;
    if let Ok(Some(first)) = tokio::time::timeout(Duration::from_secs(2), changes.recv()).await {
        auth.apply(first);
    }
    let jobs = jobs.clone();
    let follower = auth.clone().follow(changes, move |key| jobs.end_long_polls_of(key));
    Some(AbortOnDrop(tokio::spawn(follower)))
}

impl Application {
    /// Opens the store, applies migrations if the settings say so, and
    /// builds API and worker.
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        Self::build_as(settings, Role::All).await
    }

    /// Builds only the parts `role` names. The tasks' schemas and
    /// templates are compiled first, so that a broken one stops the process
    /// before it touches the database.
    /// A Postgres database that is unreachable or a standby is waited for,
    /// whether the migrations are applied at start or not, the API
    /// answering 503 meanwhile (`app::database`).
    pub async fn build_as(settings: Settings, role: Role) -> Result<Self, StartError> {
        let catalog = Arc::new(Catalog::new(&settings)?);
        let store = open_store(&settings)?;
        let mut listener = bind_api(&settings, role)?;
        // First: whatever starts next may record a metric, and a sample
        // recorded before the recorder is installed is lost (a connection
        // refused while waiting, the first read of the replication
        // settings, whose gauge would be missing until the next read a
        // minute later).
        crate::process::metrics::key_owner_labels(owner_label_key(&settings)?);
        let metrics = start_metrics(&settings);
        let migrate = settings.database.migrate_on_start;
        let postgres = settings.database.url().starts_with("postgres");
        let prepare = || async {
            store.check_session_pooling().await?;
            match (migrate, postgres) {
                (true, _) => store.migrate().await,
                // Without migrating, a pool connection's first check: a
                // standby or a read-only server is waited for as when
                // migrating.
                (false, true) => store.check_ready().await,
                (false, false) => Ok(()),
            }
        };
        if postgres {
            let head_timeout = settings.server.request_timeout;
            database::wait_until_prepared(listener.as_mut(), head_timeout, prepare).await?;
        } else {
            prepare().await?;
        }
        Self::build_with_catalog(settings, store, catalog, role, listener, metrics).await
    }

    /// Builds the rest around the open store and the compiled catalog: the
    /// providers, the worker, the use cases and the tasks that run beside.
    async fn build_with_catalog(
        settings: Settings,
        store: Store,
        catalog: Arc<Catalog>,
        role: Role,
        listener: Option<TcpListener>,
        (metrics, metrics_upkeep): (metrics_exporter_prometheus::PrometheusHandle, AbortOnDrop),
    ) -> Result<Self, StartError> {
        let signals = Arc::new(Signals::default());
        let (providers, simulator) = start_providers(&settings).await?;
        let providers = Arc::new(providers);
        let outputs = worker_outputs(&settings, &store, listener.as_ref())?;
        let files = outputs.files.clone();
        let (recorder, worker, qualifying) =
            start_worker(&settings, &store, &catalog, &providers, &signals, role, outputs);
        let auth = Arc::new(Authenticator::new(store.clone(), settings.server.auth_cache_ttl));
        let shutdown_grace = settings.worker.shutdown_grace;
        let limiter = rate_limiter(&settings);
        let limiter_sweep = limiter.clone().map(|limiter| AbortOnDrop(tokio::spawn(sweep_limiter(limiter))));
        let worker_heartbeat = worker.as_ref().map(|w| w.heartbeat.clone());
        let worker_heartbeat_limit = settings.worker.poll_interval.saturating_mul(10).max(Duration::from_secs(15));
        let jobs = build_jobs(&settings, &store, &catalog, &signals, files);
        let key_follower = if role == Role::Worker { None } else { follow_key_changes(&store, &auth, &jobs).await };
        let (replication, replication_follower) = follow_replication(&store);
        let breaker_refresh = follow_breakers(&store, &catalog).await;
        let state = AppState {
            keys: Arc::new(crate::keys::Keys::new(store.clone())),
            sessions: Arc::new(crate::keys::sessions::Sessions::new(store.clone())),
            endpoints: Arc::new(crate::webhooks::Endpoints::new(
                store.clone(),
                settings.webhooks.max_endpoints_per_owner,
            )),
            qualifications: Arc::new(crate::task::qualify::Qualifications::new(
                store.clone(),
                providers.clone(),
                catalog.clone(),
            )),
            callbacks: Arc::new(crate::callbacks::Callbacks::new(recorder)),
            catalog,
            jobs,
            providers,
            metrics,
            limiter,
            auth_failures: Arc::new(crate::keys::AuthFailures::new(settings.server.auth_failures_per_minute)),
            worker_heartbeat,
            worker_heartbeat_limit,
            storage_full_at: Arc::default(),
            replication,
            auth,
            signals,
            webhook_hosts: crate::webhooks::address::AllowedHosts::new(&settings.webhooks.allow_hosts),
            settings: Arc::new(settings.server),
        };
        Ok(Self {
            listener,
            state,
            worker,
            qualifying,
            shutdown_grace,
            _simulator: simulator,
            _key_follower: key_follower,
            _limiter_sweep: limiter_sweep,
            _breaker_refresh: breaker_refresh,
            _replication_follower: replication_follower,
            _metrics_upkeep: metrics_upkeep,
        })
    }

    /// The qualifications run at start (`qualify_on_start`), for a caller
    /// that wants to wait for them; they run whether or not it is taken.
    pub fn take_startup_qualifications(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        self.qualifying.take()
    }

    /// The address the API is bound to (port 0 becomes a real port).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().map(|l| l.local_addr().expect("a bound listener has an address"))
    }

    /// The shared state, for tests that reach the store directly.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Runs until `shutdown` completes: the API stops taking connections and
    /// finishes its requests, the worker stops claiming and lets attempts in
    /// flight finish within the grace period.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
        let worker = self.worker.map(|worker| tokio::spawn(worker.run(stopped.clone())));
        if let Some(listener) = self.listener {
            let mut api_stopped = stopped.clone();
            let head_timeout = self.state.settings.request_timeout;
            let jobs = self.state.jobs.clone();
            let router = router(self.state);
            http::serve::serve(listener, router, head_timeout, async move {
                let _ = api_stopped.wait_for(|stop| *stop).await;
                // Open long-polls and event streams end now: the requests in
                // flight finish, and no client holds the server open.
                jobs.stop_long_polls();
            })
            .await?;
            tracing::info!("API stopped");
        }
        if let Some(worker) = worker {
            // A worker runs until it is told to stop (a worker-only process
            // has no API to wait for); it then bounds its own drain by the
            // grace period, and this timeout is a backstop counted from the
            // stop, never from the start.
            let mut worker_stopped = stopped.clone();
            let _ = worker_stopped.wait_for(|stop| *stop).await;
            let _ = tokio::time::timeout(self.shutdown_grace + Duration::from_secs(5), worker).await;
        }
        Ok(())
    }
}

/// The API's listener, unless `role` serves no API.
fn bind_api(settings: &Settings, role: Role) -> Result<Option<TcpListener>, StartError> {
    if role == Role::Worker {
        return Ok(None);
    }
    let addr = settings.server.listen;
    crate::process::listener::bind(addr).map(Some).map_err(|source| StartError::Bind { addr, source })
}

/// The worker, which records the outcomes of attempts whatever the role
/// (a process that runs no worker loop still records callbacks by it),
/// and, unless `role` runs no worker, the worker to run and its
/// qualifications at start (spawned now).
fn start_worker(
    settings: &Settings,
    store: &Store,
    catalog: &Arc<Catalog>,
    providers: &Arc<Providers>,
    signals: &Arc<Signals>,
    role: Role,
    outputs: crate::worker::Outputs,
) -> (Arc<Worker>, Option<Arc<Worker>>, Option<tokio::task::JoinHandle<()>>) {
    let worker =
        Arc::new(Worker::new(store.clone(), catalog.clone(), providers.clone(), signals.clone(), settings, outputs));
    if role == Role::Api {
        return (worker, None, None);
    }
    let qualifying =
        tokio::spawn(crate::task::qualify::qualify_on_start(store.clone(), providers.clone(), catalog.clone()));
    (worker.clone(), Some(worker), Some(qualifying))
}

/// Where the worker's providers call back (the settings' public URL, else
/// the API's own address), and where it keeps the files of outputs. A
/// provider that calls back from another host needs the public URL; a
/// process that serves no API, without one, claims none of its attempts.
fn worker_outputs(
    settings: &Settings,
    store: &Store,
    listener: Option<&TcpListener>,
) -> Result<crate::worker::Outputs, StartError> {
    let own = listener.and_then(|l| l.local_addr().ok()).map(|addr| {
        let host = if addr.ip().is_unspecified() { std::net::IpAddr::from([127, 0, 0, 1]) } else { addr.ip() };
        format!("http://{}", SocketAddr::new(host, addr.port()))
    });
    let base = settings.server.public_url.clone().or(own);
    for (name, provider) in settings.providers.iter().filter(|(_, p)| p.answers_by_callback()) {
        let elsewhere = provider.base_url.as_deref().is_some_and(|url| !is_loopback_url(url));
        if base.is_none() {
            // This worker claims none of its attempts, and says why.
            tracing::warn!(
                provider = %name,
                "provider {name} calls back, and this process serves no API to call back to: this worker leaves its \
                 attempts to a process that can be called back, until server.public_url names the API's URL"
            );
        } else if elsewhere && settings.server.public_url.is_none() {
            let message = format!(
                "server.public_url: provider {name} calls back from another host, which cannot reach this server's \
                 own loopback address; set it to the URL at which providers reach the API"
            );
            return Err(StartError::Config(crate::config::ConfigError::Invalid(message)));
        }
    }
    let files = crate::files::Files::of(&settings.files, settings.database.url())
        .map_err(|why| StartError::Config(crate::config::ConfigError::Invalid(why)))?;
    Ok(crate::worker::Outputs {
        callbacks: Arc::new(crate::worker::callback_urls::CallbackUrls::new(store.clone(), base)),
        files: Arc::new(files),
    })
}

/// Whether `url` names this machine (`localhost` or a loopback address).
fn is_loopback_url(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else { return false };
    let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The per-owner rate limiter the settings ask for, if any.
fn rate_limiter(settings: &Settings) -> Option<Arc<governor::DefaultKeyedRateLimiter<crate::domain::OwnerId>>> {
    (settings.server.rate_limit_per_second > 0).then(|| {
        let rate = std::num::NonZeroU32::new(settings.server.rate_limit_per_second).expect("checked above");
        let burst = std::num::NonZeroU32::new(settings.server.rate_limit_burst).expect("validated at load");
        Arc::new(governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(burst)))
    })
}

/// Builds the jobs' use cases with their long-poll intervals and claim limits.
fn build_jobs(
    settings: &Settings,
    store: &Store,
    catalog: &Arc<Catalog>,
    signals: &Arc<Signals>,
    files: Arc<crate::files::Files>,
) -> Arc<Jobs> {
    let long_poll_interval = settings.worker.long_poll_interval;
    let long_polls_per_owner = settings.server.max_long_polls_per_owner;
    let intervals =
        crate::jobs::Intervals { long_poll: long_poll_interval, event_stream: settings.server.event_stream_interval };
    let limits = crate::store::claims::ClaimLimits::new(
        settings.worker.max_in_flight_per_owner,
        settings.providers.iter().map(|(name, provider)| (name.clone(), provider.limits())),
    );
    Arc::new(
        Jobs::new(
            store.clone(),
            catalog.clone(),
            signals.clone(),
            long_polls_per_owner,
            settings.server.replay_cache_keys,
            intervals,
            limits,
        )
        .with_unknown_retry_after(settings.server.unknown_retry_after)
        .with_files(files),
    )
}

/// Starts reading, every minute, whether the database's commits wait for a
/// standby: the slot it keeps current, and the task.
fn follow_replication(store: &Store) -> (crate::state::ReplicationSlot, AbortOnDrop) {
    let replication = crate::state::ReplicationSlot::default();
    let follower = AbortOnDrop(tokio::spawn(database::follow_replication(store.clone(), replication.clone())));
    (replication, follower)
}

/// The key of `server.metrics_owner_key_env`, when it names one; a name
/// whose variable is unset or empty stops the start.
fn owner_label_key(settings: &Settings) -> Result<Option<Vec<u8>>, StartError> {
    let Some(name) = &settings.server.metrics_owner_key_env else { return Ok(None) };
    match std::env::var(name) {
        Ok(key) if !key.is_empty() => Ok(Some(key.into_bytes())),
        _ => {
            let unset = format!("server.metrics_owner_key_env names {name}, which is unset or empty");
            Err(crate::config::ConfigError::Invalid(unset).into())
        }
    }
}

/// Installs the metrics' recorder, starts folding its samples into their
/// buckets, has the store's database failures counted, and sets the
/// settings' series at zero.
fn start_metrics(settings: &Settings) -> (metrics_exporter_prometheus::PrometheusHandle, AbortOnDrop) {
    let metrics = crate::process::metrics::install();
    crate::store::report_database_failures_to(|failure| match failure {
        crate::store::DatabaseFailure::StorageFull => crate::process::metrics::storage_full(),
        crate::store::DatabaseFailure::Unreachable => crate::process::metrics::database_unavailable(),
        crate::store::DatabaseFailure::ConnectionRefused => crate::process::metrics::connection_refused(),
    });
    let upkeep = AbortOnDrop(tokio::spawn(crate::process::metrics::keep_up(metrics.clone())));
    crate::process::metrics::start_at_zero(settings);
    (metrics, upkeep)
}

/// Reads the providers' breakers once, then starts refreshing them every
/// second, when any provider has one.
async fn follow_breakers(store: &Store, catalog: &Catalog) -> Option<AbortOnDrop> {
    let breakers = catalog.breakers().clone();
    if !breakers.any() {
        return None;
    }
    // Known before the first request: a restarted process routes
    // around a breaker opened before it started.
    if let Err(error) = crate::task::breakers::refresh(store, &breakers).await {
        tracing::warn!(%error, "reading the providers' breakers failed; they count as closed until read");
    }
    let refresh = crate::task::breakers::refresh_every_second(store.clone(), breakers);
    Some(AbortOnDrop(tokio::spawn(refresh)))
}

/// Every route this process serves: the JSON API's and the dashboard's,
/// with what every request gets (see [`http::serve_routes`]).
pub fn router(state: AppState) -> axum::Router {
    let (api, _) = http::api().split_for_parts();
    http::serve_routes(api.merge(crate::ui::router(state.clone())), state)
}

/// Builds the providers, starting the simulator in-process when a `sim`
/// provider needs one and no running simulator is configured.
pub async fn start_providers(settings: &Settings) -> Result<(Providers, Option<RunningSimulator>), StartError> {
    let needs_simulator = settings.providers.values().any(|p| p.kind == ProviderKind::Sim);
    let (url, simulator) = match (&settings.simulator.url, needs_simulator) {
        (Some(url), _) => (Some(url.clone()), None),
        (None, true) => {
            let addr = SocketAddr::from(([127, 0, 0, 1], 0));
            let running = sim::spawn(settings, addr).await.map_err(|source| StartError::Bind { addr, source })?;
            tracing::info!(address = %running.addr, "simulator started in-process");
            (Some(running.url()), Some(running))
        }
        (None, false) => (None, None),
    };
    let providers = provider::build(settings, url.as_deref()).map_err(StartError::Providers)?;
    Ok((providers, simulator))
}
