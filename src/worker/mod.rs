//! The worker: claim → call → record. Claims pending attempts in batches
//! under a lease (`for update skip locked`), runs many at once, calls each
//! provider with the attempt's deadline, and records the outcome through the
//! store's guarded transitions: an output through the job's compare-and-swap
//! (I3), a definitive failure as `failed` (then the retry policy), anything
//! ambiguous as `unknown` (I4). Beside it run the reaper (expired leases →
//! `unknown`), the reconciler (unknown attempts settled by asking the
//! provider), the webhooks' deliverer (`crate::webhooks`) and the purger
//! (finished jobs past their retention).

mod attempt;
pub(crate) mod callback_urls;
mod finishes;
mod hedge;
pub(crate) mod output;
mod purger;
mod reaper;
mod reconciler;
mod record;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::config::{RetentionSettings, WebhookSettings, WorkerSettings};
use crate::process::signals::Signals;
use crate::provider::Providers;
use crate::store::{ClaimRules, Store};
use crate::task::catalog::Catalog;

pub use purger::{Ending as PurgeEnding, Pace as PurgePace, purge_due, rules as purge_rules};
pub use record::record_outcome;

/// Everything a worker process shares between its loops and attempts.
pub struct Worker {
    /// The database.
    pub store: Store,
    /// Tasks and their policies.
    pub catalog: Arc<Catalog>,
    /// Where attempts are sent.
    pub providers: Arc<Providers>,
    /// Wake-ups and change notices.
    pub signals: Arc<Signals>,
    /// `[worker]`
    pub settings: WorkerSettings,
    /// `[webhooks]`: its deliverer sends the outbox's deliveries.
    pub webhooks: WebhookSettings,
    /// `[retention]`: its purger removes finished jobs past it.
    pub retention: RetentionSettings,
    /// This worker's name in leases and events.
    pub id: String,
    /// When the claim loop last ran (Unix seconds), for `/readyz`.
    pub heartbeat: Arc<std::sync::atomic::AtomicI64>,
    /// Where this worker's claims are in their round of owners.
    rotation: crate::store::claims::Rotation,
    /// This worker's outputs waiting to be settled in a batch.
    finishes: finishes::Finishes,
    /// The group commit of this process's streamed pieces.
    appends: std::sync::Arc<output::Appends>,
    /// This process's provider latencies and hedge budgets.
    hedging: hedge::Hedging,
    /// The callback URLs given to providers that call back.
    pub(crate) callbacks: Arc<callback_urls::CallbackUrls>,
    /// Where the files of outputs are kept.
    pub(crate) files: Arc<crate::files::Files>,
}

/// Where a worker's providers call back, and where the files of outputs
/// are kept.
pub(crate) struct Outputs {
    /// The callback URLs given to providers that call back.
    pub(crate) callbacks: Arc<callback_urls::CallbackUrls>,
    /// Where the files of outputs are kept.
    pub(crate) files: Arc<crate::files::Files>,
}

impl Worker {
    /// A worker named after this host and process.
    pub(crate) fn new(
        store: Store,
        catalog: Arc<Catalog>,
        providers: Arc<Providers>,
        signals: Arc<Signals>,
        settings: &crate::config::Settings,
        outputs: Outputs,
    ) -> Self {
        let (webhooks, retention) = (settings.webhooks.clone(), settings.retention.clone());
        let settings = settings.worker.clone();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let id = format!("{}-{}-{}", host.trim(), std::process::id(), &uuid::Uuid::now_v7().simple().to_string()[24..]);
        let heartbeat = Arc::new(std::sync::atomic::AtomicI64::new(chrono::Utc::now().timestamp()));
        let rotation = crate::store::claims::Rotation::default();
        let (finishes, appends) = (finishes::Finishes::default(), std::sync::Arc::default());
        let hedging = hedge::Hedging::new(&catalog);
        Self {
            store,
            catalog,
            providers,
            signals,
            settings,
            webhooks,
            retention,
            id,
            heartbeat,
            rotation,
            finishes,
            appends,
            hedging,
            callbacks: outputs.callbacks,
            files: outputs.files,
        }
    }

    /// What this worker's claims go by. A provider that calls back is left
    /// out when this process knows no URL to be called back at: its
    /// attempts wait for a process that does.
    fn claim_rules(&self) -> ClaimRules {
        let margin = self.settings.lease_margin;
        let callable = |p: &Arc<dyn crate::provider::Provider>| {
            !p.settings().answers_by_callback() || self.callbacks.can_be_called_back()
        };
        let by_provider: Vec<(String, Duration)> = self
            .providers
            .iter()
            .filter(|(_, p)| callable(p))
            .map(|(name, p)| (name.clone(), p.settings().timeout + margin))
            .collect();
        let default = by_provider.iter().map(|(_, lease)| *lease).max().unwrap_or(margin);
        let providers = self.providers.iter().map(|(name, p)| (name.clone(), p.settings().limits()));
        let limits = crate::store::claims::ClaimLimits::new(self.settings.max_in_flight_per_owner, providers);
        ClaimRules { default, by_provider, limits, rotation: self.rotation.clone() }
    }

    /// Runs the claim loop, the reaper and the reconciler until `shutdown`
    /// turns true; then lets attempts in flight finish within the grace
    /// period and leaves the rest to the reaper.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        tracing::info!(worker = %self.id, "worker started");
        let reaper = tokio::spawn(reaper::run(self.clone(), shutdown.clone()));
        let reconciler = tokio::spawn(reconciler::run(self.clone(), shutdown.clone()));
        let deliverer = Arc::new(crate::webhooks::Deliverer::new(self.store.clone(), self.webhooks.clone()));
        let deliveries = tokio::spawn(deliverer.run(shutdown.clone()));
        let purger = tokio::spawn(purger::run(self.clone(), shutdown.clone()));
        self.claim_loop(shutdown).await;
        // A stopped worker is not ready.
        self.heartbeat.store(0, std::sync::atomic::Ordering::Relaxed);
        let _ = tokio::join!(reaper, reconciler, deliveries, purger);
        tracing::info!(worker = %self.id, "worker stopped");
    }

    async fn claim_loop(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let rules = self.claim_rules();
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let poll = self.settings.poll_interval;
        let mut in_flight = JoinSet::new();
        while !*shutdown.borrow() {
            self.heartbeat.store(chrono::Utc::now().timestamp(), std::sync::atomic::Ordering::Relaxed);
            while in_flight.try_join_next().is_some() {}
            let free = permits.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = in_flight.join_next() => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            let want = u32::try_from(free).unwrap_or(u32::MAX).min(self.settings.batch_size);
            // Each lease ends, by this process's monotonic clock, no later
            // than the database's: counted from before the claim was sent.
            let claim_sent = tokio::time::Instant::now();
            match self.store.claim_attempts(&self.id, want, &rules).await {
                Ok(claimed) if !claimed.attempts.is_empty() => {
                    count_claim(&claimed);
                    for claimed in claimed.attempts {
                        // The claim is a change of its job: this process's
                        // event streams of it hear at once, its long-polls
                        // after their grace for the outcome (`jobs::CLAIM_GRACE`).
                        self.signals.job_claimed(claimed.attempt.job_id);
                        let permit =
                            permits.clone().try_acquire_owned().expect("claimed no more than the free permits");
                        let worker = self.clone();
                        let lease_end = claim_sent + rules.lease_of(&claimed.provider);
                        in_flight.spawn(async move {
                            attempt::run(&worker, claimed, lease_end).await;
                            drop(permit);
                        });
                    }
                }
                Ok(claimed) => {
                    count_claim(&claimed);
                    tokio::select! {
                        _ = self.signals.work() => {}
                        _ = tokio::time::sleep(poll) => {}
                        _ = shutdown.changed() => {}
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "claiming attempts failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(poll) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
        }
        let running = in_flight.len();
        if running > 0 {
            tracing::info!(running, "stopped claiming; letting attempts in flight finish");
        }
        let grace = tokio::time::sleep(self.settings.shutdown_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                next = in_flight.join_next() => if next.is_none() { break },
                _ = &mut grace => {
                    tracing::warn!(left = in_flight.len(), "grace period over: the reaper will settle what is left");
                    in_flight.abort_all();
                    break;
                }
            }
        }
    }

    /// The exponential backoff of the `count`th status lookup.
    fn reconcile_backoff(&self, count: i32) -> Duration {
        let factor = 1u32 << u32::try_from(count.saturating_sub(1)).unwrap_or(0).min(20);
        self.settings.reconcile_backoff.saturating_mul(factor).min(self.settings.reconcile_backoff_max)
    }
}

/// Counts a claim in the metrics: its batch, how long each attempt waited
/// for it, and the attempts it left pending, by the limit that held them.
fn count_claim(claimed: &crate::store::claims::Claimed) {
    if !claimed.attempts.is_empty() {
        crate::process::metrics::claim_batch(claimed.attempts.len());
    }
    for attempt in &claimed.attempts {
        crate::process::metrics::attempt_waited(&attempt.provider, attempt.waited);
    }
    for (&why, &count) in &claimed.deferred {
        crate::process::metrics::claims_deferred(why, count);
    }
}
