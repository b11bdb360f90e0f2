//! Hedging a running attempt: from its send, the attempt's own worker waits
//! its task's hedge delay; if no answer came by then (for a streaming task:
//! no piece of it was stored), it asks the store to add a hedge, which
//! decides with the job locked ([`crate::domain::hedge::check_hedge`]). The
//! hedge is claimed and sent as any attempt is; the job's compare-and-swap
//! takes whichever answers first, and the loser is canceled as any loser.
//!
//! What this process knows, it keeps here: its providers' latest answer
//! latencies (for a percentile delay) and each task's jobs and hedges of
//! the last minute (for `max_share`). Each process counts the jobs it sent
//! and the hedges it started: when every process keeps its own share
//! within `max_share`, so do all of them together.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Worker;
use crate::domain::AttemptOrigin;
use crate::domain::hedge::{HedgeShare, HedgeSkip, LatencyWindow};
use crate::process::metrics;
use crate::store::{ClaimedAttempt, Hedged};

/// This process's latencies and hedge budgets.
pub(super) struct Hedging {
    /// The latest answers' latencies by provider: whole answers, then
    /// streamed ones (to their first piece).
    latencies: Mutex<HashMap<String, [LatencyWindow; 2]>>,
    /// Each task's jobs and hedges over the last minute.
    shares: Mutex<HashMap<String, HedgeShare>>,
    /// Where this process's seconds count from.
    epoch: Instant,
    /// Whether any task hedges after a percentile: only then are answers'
    /// latencies kept.
    learns: bool,
}

impl Hedging {
    /// The latencies and budgets of a process whose tasks are `catalog`'s.
    pub(super) fn new(catalog: &crate::task::catalog::Catalog) -> Self {
        let learns = catalog.tasks().any(|t| t.settings.hedge.as_ref().is_some_and(|h| h.after_percentile.is_some()));
        Self { latencies: Mutex::default(), shares: Mutex::default(), epoch: Instant::now(), learns }
    }

    /// Keeps how long an answer of `provider` took (a streamed one: to its
    /// first piece), when a task hedges after a percentile.
    pub(super) fn answered(&self, provider: &str, streamed: bool, latency: Duration) {
        if !self.learns {
            return;
        }
        let mut latencies = self.latencies.lock().expect("hedge latencies lock");
        if let Some(windows) = latencies.get_mut(provider) {
            windows[usize::from(streamed)].record(latency);
            return;
        }
        let mut windows: [LatencyWindow; 2] = Default::default();
        windows[usize::from(streamed)].record(latency);
        latencies.insert(provider.to_owned(), windows);
    }

    fn second(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    fn wait(&self, delay: crate::domain::hedge::HedgeDelay, provider: &str, streamed: bool) -> Option<Duration> {
        let latencies = self.latencies.lock().expect("hedge latencies lock");
        match latencies.get(provider) {
            Some(windows) => delay.wait(&windows[usize::from(streamed)]),
            None => delay.wait(&LatencyWindow::default()),
        }
    }

    fn share<T>(&self, task: &str, change: impl FnOnce(&mut HedgeShare) -> T) -> T {
        let mut shares = self.shares.lock().expect("hedge shares lock");
        if !shares.contains_key(task) {
            shares.insert(task.to_owned(), HedgeShare::default());
        }
        change(shares.get_mut(task).expect("inserted above"))
    }
}

/// Runs beside the call of `claimed`, sent at `sent`, until the call ends
/// (it never returns: the call's end drops it). A job's first attempt
/// counts toward its task's share; an attempt that is not itself a hedge
/// is hedged after the task's delay, up to `max_hedges` times (the n-th
/// hedge n delays after the send), while the budget and the job allow.
pub(super) async fn hedge_while_running(worker: &Worker, claimed: &ClaimedAttempt, sent: Instant) {
    hedge(worker, claimed, sent).await;
    std::future::pending::<()>().await;
}

async fn hedge(worker: &Worker, claimed: &ClaimedAttempt, sent: Instant) {
    let Some(task) = worker.catalog.task(&claimed.task) else { return };
    let Some(policy) = &task.settings.hedge else { return };
    let hedging = &worker.hedging;
    if claimed.attempt.number == 1 {
        hedging.share(&task.name, |share| share.job(hedging.second()));
    }
    if claimed.origin == AttemptOrigin::Hedge {
        return;
    }
    let Some(wait) = hedging.wait(policy.delay(), &claimed.provider, task.settings.stream) else { return };
    let breakers = worker.catalog.breakers();
    for round in 1..=policy.max_hedges {
        let waited = wait.saturating_mul(round);
        tokio::time::sleep_until(sent + waited).await;
        let second = hedging.second();
        if !hedging.share(&task.name, |share| share.try_hedge(second, policy.max_share)) {
            metrics::hedge_skipped(HedgeSkip::Share);
            return;
        }
        // Hedges pass over a provider whose breaker is open.
        let providers: Vec<String> =
            policy.providers_of(&task.settings).iter().filter(|p| breakers.routable(p)).cloned().collect();
        let limits = (policy.max_hedges, waited);
        match worker.store.admit_hedge(&claimed.attempt, &providers, limits, worker.catalog.as_ref()).await {
            Ok(Hedged::Started { number, provider }) => {
                tracing::info!(hedge = number, hedge.provider = %provider, waited_ms = waited.as_millis() as u64,
                               "no answer in time: a hedge was started");
                metrics::hedge_started(&provider);
                worker.signals.work_available();
                worker.signals.job_changed(claimed.attempt.job_id);
            }
            Ok(Hedged::Skipped(skip)) => {
                hedging.share(&task.name, |share| share.untake(second));
                tracing::debug!(why = skip.as_str(), "a hedge was due but not started");
                metrics::hedge_skipped(skip);
                return;
            }
            Err(error) => {
                hedging.share(&task.name, |share| share.untake(second));
                tracing::warn!(%error, "starting a hedge failed: the attempt runs on unhedged");
                return;
            }
        }
    }
}
