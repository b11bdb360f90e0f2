//! One typed `Settings`, read once: the TOML file (or the built-in default),
//! then a short, documented list of environment overrides. Everything is
//! checked here, so a running server never meets a bad setting.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use crate::domain::retention::Span;
pub use files::{FileRules, FilesSettings, S3Settings};
pub use provider::{
    BreakerSettings, JobApi, JobCall, JobMethod, JobReading, JobSignature, JobState, MaxTokensField, ProviderApi,
    ProviderKind, ProviderLimits, ProviderSettings, Redirects, ReplicateModel, SignatureScheme, SimFault, SimOutput,
    Tokenizer,
};
pub use task::{ExampleSettings, HedgeSettings, PromptSettings, TaskSettings};

mod breaker;
pub(crate) mod duration;
mod files;
mod provider;
mod sim;
mod task;
mod validate;

/// The built-in configuration, printed by `onejob config print-default`.
pub const DEFAULT_CONFIG: &str = include_str!("../config/default.toml");

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown or mistyped settings.
    #[error("invalid configuration: {0}")]
    Parse(#[from] toml::de::Error),
    /// An environment override does not parse.
    #[error("environment variable {name}: {message}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Why.
        message: String,
    },
    /// The settings parse but contradict each other.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Every setting of onejob.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The HTTP API.
    #[serde(default)]
    pub server: ServerSettings,
    /// The database.
    #[serde(default)]
    pub database: DatabaseSettings,
    /// The attempt worker, reaper and reconciler.
    #[serde(default)]
    pub worker: WorkerSettings,
    /// The built-in provider simulator.
    #[serde(default)]
    pub simulator: SimulatorSettings,
    /// Tasks by name.
    #[serde(default)]
    pub tasks: BTreeMap<String, TaskSettings>,
    /// Providers by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderSettings>,
    /// Webhook deliveries.
    #[serde(default)]
    pub webhooks: WebhookSettings,
    /// How long finished jobs, and with them their keys, are kept.
    #[serde(default)]
    pub retention: RetentionSettings,
    /// Where the files of outputs are kept.
    #[serde(default)]
    pub files: FilesSettings,
}

/// `[retention]`: spans are written `"30d"`, `"24h"`, `"90m"`, `"2s"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// How long after its last change a finished job (`succeeded`,
    /// `canceled`, or `failed` with no attempt open) is kept; then it is
    /// purged with its attempts, events and deliveries, and its key is free.
    /// A task's `retain_finished` overrides it.
    pub finished_jobs: Span,
    /// Allows retentions under 24 h (for tests): a key must otherwise be
    /// held at least a day.
    pub allow_short: bool,
    /// How often the purger looks for jobs past their retention.
    pub purge_interval: Span,
    /// Jobs purged in one transaction.
    pub batch_size: u32,
    /// The pause between two batches, so that a large purge leaves the
    /// database to the jobs' own work.
    pub batch_pause: Span,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        let span = |text: &str| text.parse().expect("a span");
        Self {
            finished_jobs: span("30d"),
            allow_short: false,
            purge_interval: span("1m"),
            batch_size: 500,
            batch_pause: span("100ms"),
        }
    }
}

/// `[webhooks]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookSettings {
    /// Hosts an endpoint may name although they are not public: `http://`
    /// is allowed for them, and their addresses may be private, loopback
    /// or link-local. Empty: every endpoint is `https://` on a public address.
    pub allow_hosts: Vec<String>,
    /// How long one try may take, connecting and answering.
    #[serde(rename = "timeout_ms", with = "duration::millis")]
    pub timeout: Duration,
    /// The wait before the second try; doubled each try after.
    #[serde(rename = "retry_base_ms", with = "duration::millis")]
    pub retry_base: Duration,
    /// The longest wait between two tries.
    #[serde(rename = "retry_max_ms", with = "duration::millis")]
    pub retry_max: Duration,
    /// How long a delivery is tried before it is marked failed.
    #[serde(rename = "retry_for_ms", with = "duration::millis")]
    pub retry_for: Duration,
    /// How often the outbox is looked at for due deliveries.
    #[serde(rename = "poll_interval_ms", with = "duration::millis")]
    pub poll_interval: Duration,
    /// Deliveries claimed in one statement.
    pub batch_size: u32,
    /// Deliveries one process sends at once.
    pub concurrency: usize,
    /// The most of a receiver's answer that is read (and dropped).
    pub max_response_bytes: usize,
    /// The most endpoints one owner may have registered.
    pub max_endpoints_per_owner: u32,
    /// The most deliveries of one owner a process sends at once.
    pub max_in_flight_per_owner: usize,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            allow_hosts: Vec::new(),
            timeout: Duration::from_millis(10_000),
            retry_base: Duration::from_millis(5_000),
            retry_max: Duration::from_millis(3_600_000),
            retry_for: Duration::from_millis(86_400_000),
            poll_interval: Duration::from_millis(500),
            batch_size: 32,
            concurrency: 256,
            max_response_bytes: 4_096,
            max_endpoints_per_owner: 10,
            max_in_flight_per_owner: 16,
        }
    }
}

/// `[server]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Where the API listens.
    pub listen: SocketAddr,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest a request may take before it is answered 503.
    #[serde(rename = "request_timeout_ms", with = "duration::millis")]
    pub request_timeout: Duration,
    /// How long an authenticated key is trusted without a new look-up, at
    /// most: the cache forgets a key as soon as its change is heard.
    #[serde(rename = "auth_cache_ttl_ms", with = "duration::millis")]
    pub auth_cache_ttl: Duration,
    /// Retry-After of 409 `attempt-outcome-unknown`.
    #[serde(rename = "unknown_retry_after_secs", with = "duration::secs")]
    pub unknown_retry_after: Duration,
    /// Requests per second each owner may make to this process, on average
    /// (0: no limit). Each replica counts on its own: behind a load
    /// balancer spreading requests over N replicas an owner may make N
    /// times this many, so set it to the wanted total divided by N.
    pub rate_limit_per_second: u32,
    /// Requests an owner may make to this process in a burst above that
    /// rate (also per replica).
    pub rate_limit_burst: u32,
    /// Requests this process serves at once; more are answered 503 at once.
    /// A long-poll holds a slot only until it starts waiting.
    pub max_concurrent_requests: usize,
    /// Long-polls (`GET /jobs/{id}?wait=N`, N over 0) each owner may hold
    /// open on this process at once; one more is answered 429
    /// `too-many-long-polls`. Per replica, like the rate limit. Event
    /// streams (`GET /jobs/{id}/events`) count among them.
    pub max_long_polls_per_owner: usize,
    /// How often an event stream rereads its job's log for events
    /// committed by other processes (its own process's wake it at once).
    #[serde(rename = "event_stream_interval_ms", with = "duration::millis")]
    pub event_stream_interval: Duration,
    /// Requests with an unknown or revoked API key one address may make to
    /// this process in a minute (0: no limit); past it, its requests that
    /// would look a key up are answered 429 at once, before any look-up.
    pub auth_failures_per_minute: u32,
    /// Taken idempotency keys this process remembers at most (about 200
    /// bytes each), so that a repeated key is answered without trying an
    /// insert; the least recently used go first.
    pub replay_cache_keys: usize,
    /// The load balancers in front of this process: for a connection from
    /// one of these, the client's address is the last of its
    /// `X-Forwarded-For`. Empty: the connection's own address, always.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// The URL at which providers reach this server's callbacks (a load
    /// balancer's, or a proxy's); by default `http://` and the address
    /// the API is bound to. A process that runs no API needs it.
    pub public_url: Option<String>,
    /// The environment variable holding the key `/metrics` names owners
    /// with (an HMAC of the owner's id); every replica should share it.
    /// Without it, each process takes a random key of its own.
    pub metrics_owner_key_env: Option<String>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 256 * 1024,
            request_timeout: Duration::from_millis(30_000),
            auth_cache_ttl: Duration::from_millis(10_000),
            unknown_retry_after: Duration::from_secs(5),
            rate_limit_per_second: 200,
            rate_limit_burst: 400,
            max_concurrent_requests: 1024,
            max_long_polls_per_owner: 256,
            event_stream_interval: Duration::from_millis(500),
            auth_failures_per_minute: 60,
            replay_cache_keys: 100_000,
            trusted_proxies: Vec::new(),
            public_url: None,
            metrics_owner_key_env: None,
        }
    }
}

/// The database used when none is named: a SQLite file in the working
/// directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://onejob.db";

/// `[database]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// The database URL (`postgres://…` or `sqlite://PATH`); `DATABASE_URL`
    /// overrides it; [`DEFAULT_DATABASE_URL`] without either.
    pub url: Option<String>,
    /// SQLite: how long a writer waits for the write lock.
    #[serde(rename = "sqlite_busy_timeout_ms", with = "duration::millis")]
    pub sqlite_busy_timeout: Duration,
    /// Pool size.
    pub max_connections: u32,
    /// How long to wait for a free connection.
    #[serde(rename = "acquire_timeout_ms", with = "duration::millis")]
    pub acquire_timeout: Duration,
    /// The longest a statement may run.
    #[serde(rename = "statement_timeout_ms", with = "duration::millis")]
    pub statement_timeout: Duration,
    /// Whether `serve` applies migrations at start.
    pub migrate_on_start: bool,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: None,
            sqlite_busy_timeout: Duration::from_millis(5_000),
            max_connections: 16,
            acquire_timeout: Duration::from_millis(2_000),
            statement_timeout: Duration::from_millis(10_000),
            migrate_on_start: true,
        }
    }
}

/// `[worker]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// Whether `serve` runs a worker beside the API.
    pub enabled: bool,
    /// Attempts one process runs at once.
    pub concurrency: usize,
    /// Attempts claimed in one statement.
    pub batch_size: u32,
    /// How often to look for work when nothing woke the worker.
    #[serde(rename = "poll_interval_ms", with = "duration::millis")]
    pub poll_interval: Duration,
    /// Added to a provider's timeout to make the lease of its attempts.
    #[serde(rename = "lease_margin_ms", with = "duration::millis")]
    pub lease_margin: Duration,
    /// How often the reaper looks for expired leases.
    #[serde(rename = "reaper_interval_ms", with = "duration::millis")]
    pub reaper_interval: Duration,
    /// How often the reconciler looks for unknown attempts.
    #[serde(rename = "reconcile_interval_ms", with = "duration::millis")]
    pub reconcile_interval: Duration,
    /// First wait between two status lookups of one unknown attempt.
    #[serde(rename = "reconcile_backoff_ms", with = "duration::millis")]
    pub reconcile_backoff: Duration,
    /// Longest wait between two status lookups.
    #[serde(rename = "reconcile_backoff_max_ms", with = "duration::millis")]
    pub reconcile_backoff_max: Duration,
    /// How long in-flight attempts may finish after a shutdown signal.
    #[serde(rename = "shutdown_grace_ms", with = "duration::millis")]
    pub shutdown_grace: Duration,
    /// How often a long-poll looks at the database for changes made by
    /// other processes.
    #[serde(rename = "long_poll_interval_ms", with = "duration::millis")]
    pub long_poll_interval: Duration,
    /// How long a failed attempt waits, at most, for the verdict of a
    /// qualification of a failover provider still running in this process
    /// (within the attempt's lease), before its failover is decided.
    #[serde(rename = "failover_qualification_wait_ms", with = "duration::millis")]
    pub failover_qualification_wait: Duration,
    /// Attempts of one owner running at once across the cluster (0: no
    /// limit); a key's own `max_in_flight` overrides it for its owner.
    pub max_in_flight_per_owner: u32,
    /// How many times one attempt is put back to `pending` because its
    /// provider refused it with a 429 and `Retry-After`; one more refusal
    /// fails it, retryable. (Waiting for the provider's tokens per minute,
    /// which the provider never sees, is not counted.)
    pub max_requeues: u32,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            concurrency: 256,
            batch_size: 32,
            poll_interval: Duration::from_millis(500),
            lease_margin: Duration::from_millis(5_000),
            reaper_interval: Duration::from_millis(1_000),
            reconcile_interval: Duration::from_millis(500),
            reconcile_backoff: Duration::from_millis(500),
            reconcile_backoff_max: Duration::from_millis(30_000),
            shutdown_grace: Duration::from_millis(10_000),
            long_poll_interval: Duration::from_millis(1_000),
            failover_qualification_wait: Duration::from_millis(30_000),
            max_in_flight_per_owner: 0,
            max_requeues: 20,
        }
    }
}

/// `[simulator]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimulatorSettings {
    /// A running simulator (`onejob sim`) to use; without one, `serve`
    /// starts one in-process on loopback when any provider is `sim`.
    pub url: Option<String>,
}

impl Default for PromptSettings {
    fn default() -> Self {
        Self { system: None, user: "{{ input | tojson }}".to_owned() }
    }
}

/// Reads one environment variable; absent and empty are the same.
fn env_var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parse_env<T: std::str::FromStr>(name: &'static str) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    env_var(name)
        .map(|text| text.parse().map_err(|e: T::Err| ConfigError::Env { name, message: e.to_string() }))
        .transpose()
}

impl DatabaseSettings {
    /// The URL in force.
    pub fn url(&self) -> &str {
        self.url.as_deref().unwrap_or(DEFAULT_DATABASE_URL)
    }
}

impl Settings {
    /// The file's settings, or the built-in default without one; then the
    /// environment overrides; then the checks.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?,
            None => DEFAULT_CONFIG.to_owned(),
        };
        let mut settings = Self::parse(&text)?;
        settings.apply_env()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Parses TOML text without looking at the environment.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// The built-in default, checked, without environment overrides.
    pub fn builtin() -> Self {
        let settings = Self::parse(DEFAULT_CONFIG).expect("the built-in configuration parses");
        settings.validate().expect("the built-in configuration is valid");
        settings
    }

    /// Applies the environment overrides listed in docs/configuration.md.
    pub fn apply_env(&mut self) -> Result<(), ConfigError> {
        if let Some(url) = env_var("DATABASE_URL") {
            self.database.url = Some(url);
        }
        if let Some(listen) = parse_env("ONEJOB_LISTEN")? {
            self.server.listen = listen;
        }
        if let Some(bytes) = parse_env("ONEJOB_MAX_BODY_BYTES")? {
            self.server.max_body_bytes = bytes;
        }
        if let Some(connections) = parse_env("ONEJOB_DB_MAX_CONNECTIONS")? {
            self.database.max_connections = connections;
        }
        if let Some(migrate) = parse_env("ONEJOB_MIGRATE_ON_START")? {
            self.database.migrate_on_start = migrate;
        }
        if let Some(url) = env_var("ONEJOB_SIM_URL") {
            self.simulator.url = Some(url);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_configuration_holds_the_documented_task_and_providers() {
        let settings = Settings::builtin();
        let summarize = &settings.tasks["summarize"];
        assert_eq!(summarize.default_provider, "sim-fast");
        assert_eq!(summarize.failover, ["sim-slow"]);
        assert_eq!((summarize.max_attempts, summarize.max_in_flight), (5, 2));
        assert_eq!(summarize.input_schema["required"], serde_json::json!(["text"]));
        for name in ["sim-fast", "sim-slow", "sim-hang", "sim-late", "sim-flaky", "sim-bad-json", "sim-image"] {
            assert_eq!(settings.providers[name].kind, ProviderKind::Sim, "{name}");
        }
        assert_eq!(settings.server.listen.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn unknown_settings_are_rejected_not_ignored() {
        let error = Settings::parse("[server]\nlisten_adress = \"127.0.0.1:1\"\n").unwrap_err();
        assert!(error.to_string().contains("listen_adress"), "{error}");
    }

    #[test]
    fn a_task_naming_an_unconfigured_provider_is_rejected() {
        let settings = Settings::parse("[tasks.t]\ndefault_provider = \"nowhere\"\n").unwrap();
        let error = settings.validate().unwrap_err();
        assert!(error.to_string().contains("nowhere"), "{error}");
    }

    #[test]
    fn a_statement_timeout_of_zero_is_rejected() {
        // Zero would let a statement run for ever on the server, and onejob
        // waits for an answer only that long and a second.
        let settings = Settings::parse("[database]\nstatement_timeout_ms = 0\n").unwrap();
        let error = settings.validate().unwrap_err();
        assert!(error.to_string().contains("statement_timeout_ms must be at least 1"), "{error}");
    }

    #[test]
    fn schemas_may_be_tables_or_json_text() {
        let text = r#"
            [providers.p]
            kind = "sim"
            [tasks.a]
            default_provider = "p"
            input_schema = { type = "object", required = ["x"] }
            [tasks.b]
            default_provider = "p"
            input_schema = '{"type": "object", "required": ["x"]}'
        "#;
        let settings = Settings::parse(text).unwrap();
        settings.validate().unwrap();
        assert_eq!(settings.tasks["a"].input_schema, settings.tasks["b"].input_schema);
        assert_eq!(settings.tasks["a"].max_attempts, 5);
    }
}
