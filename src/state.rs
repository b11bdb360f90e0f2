//! What every request handler, of the JSON API and of the dashboard alike,
//! can reach. It lives beside both, so neither imports the other for it.

use std::sync::Arc;
use std::time::Duration;

use crate::config::ServerSettings;
use crate::domain::OwnerId;
use crate::jobs::Jobs;
use crate::keys::sessions::Sessions;
use crate::keys::{Authenticator, Keys};
use crate::process::signals::Signals;
use crate::provider::Providers;
use crate::task::catalog::Catalog;
use crate::task::qualify::Qualifications;
use crate::webhooks::Endpoints;

/// The shared state of the API and the dashboard.
#[derive(Clone)]
pub struct AppState {
    /// Tasks and providers.
    pub catalog: Arc<Catalog>,
    /// The job use cases.
    pub jobs: Arc<Jobs>,
    /// API keys.
    pub keys: Arc<Keys>,
    /// Dashboard sessions.
    pub sessions: Arc<Sessions>,
    /// Webhook endpoints.
    pub endpoints: Arc<Endpoints>,
    /// Providers' callbacks.
    pub(crate) callbacks: Arc<crate::callbacks::Callbacks>,
    /// Qualifications, read and run.
    pub qualifications: Arc<Qualifications>,
    /// The providers, for qualification runs.
    pub providers: Arc<Providers>,
    /// API key checks.
    pub auth: Arc<Authenticator>,
    /// `[server]` settings.
    pub settings: Arc<ServerSettings>,
    /// The hosts a webhook endpoint may name although they are not public
    /// (`webhooks.allow_hosts`).
    pub webhook_hosts: crate::webhooks::address::AllowedHosts,
    /// Wake-ups for the worker, change notices for long-polls.
    pub signals: Arc<Signals>,
    /// Renders `/metrics`.
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// The per-owner rate limit of this process (each replica keeps its
    /// own), if any.
    pub limiter: Option<Arc<governor::DefaultKeyedRateLimiter<OwnerId>>>,
    /// Requests with unknown keys per client address, to refuse an address
    /// past `server.auth_failures_per_minute` before any look-up.
    pub auth_failures: Arc<crate::keys::AuthFailures>,
    /// The worker's heartbeat (Unix seconds), when this process runs one.
    pub worker_heartbeat: Option<Arc<std::sync::atomic::AtomicI64>>,
    /// How stale that heartbeat may be before `/readyz` fails.
    pub worker_heartbeat_limit: Duration,
    /// When (Unix seconds) a request was last refused because the
    /// database's storage was full; `/readyz` fails for a while after.
    pub storage_full_at: Arc<std::sync::atomic::AtomicI64>,
    /// What the database last said of its replication (`None` until read,
    /// and on SQLite).
    pub replication: ReplicationSlot,
}

/// What the database last said of its replication, shared between the
/// task that reads it every minute and `/readyz`.
pub(crate) type ReplicationSlot = Arc<std::sync::Mutex<Option<crate::store::Replication>>>;

impl AppState {
    /// How many entries each in-memory structure that traffic fills holds
    /// now: caches at most their bound, what requests and attempts in
    /// flight hold nothing once they end.
    pub fn held_entries(&self) -> Vec<(&'static str, usize)> {
        let mut held = self.jobs.held();
        held.extend([
            ("watched_jobs", self.signals.jobs_watched()),
            ("jobs_with_calls", self.signals.jobs_with_calls()),
            ("cached_keys", self.auth.cached_keys()),
            ("auth_failure_addresses", self.auth_failures.remembered()),
            ("rate_limit_owners", self.limiter.as_ref().map_or(0, |limiter| limiter.len())),
        ]);
        held
    }
}
