//! The providers' breakers in this process: a view of each, refreshed from
//! the database every second ([`refresh`]) and at once after this process's
//! own changes, and each provider's window of call outcomes. What routes
//! around an open breaker asks [`Breakers::routable`]; an attempt about to be
//! sent asks [`Breakers::passage`] and, past a cool-down, [`take_probe`];
//! its outcome goes to [`record`]. The shared state is written only when a
//! breaker changes, never on an attempt's way.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::config::{BreakerSettings, ProviderSettings};
use crate::domain::breaker::{BreakerState, OutcomeWindow, Passage, passage};
use crate::store::breakers::{BreakerChange, StoredBreaker};
use crate::store::{self, Store};

/// How often each process reads the breakers.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// One breaker as this process sees it.
#[derive(Clone, Debug)]
pub struct View {
    /// Where it stands.
    pub state: BreakerState,
    /// When it last changed (`None`: never, as far as this process knows).
    pub since: Option<DateTime<Utc>>,
    /// When an open one's cool-down ends (`None`: an operator's, or closed).
    pub cools_at: Option<Instant>,
    /// When a probing one's probe counts as lost.
    pub probe_lost_at: Option<Instant>,
    /// Whether an operator made this change.
    pub by_operator: bool,
    /// Why.
    pub reason: String,
}

impl View {
    fn closed() -> Self {
        View {
            state: BreakerState::Closed,
            since: None,
            cools_at: None,
            probe_lost_at: None,
            by_operator: false,
            reason: String::new(),
        }
    }

    fn of(stored: &StoredBreaker, now: Instant) -> Self {
        let at = |left: Option<f64>| left.map(|s| now + Duration::from_secs_f64(s.max(0.0)));
        View {
            state: stored.state,
            since: Some(stored.since),
            cools_at: at(stored.cool_down_left),
            probe_lost_at: at(stored.probe_left),
            by_operator: stored.by_operator,
            reason: stored.reason.clone(),
        }
    }

    fn passage(&self, now: Instant) -> Passage {
        let cooled = match self.state {
            BreakerState::Open => self.cools_at.is_some_and(|at| at <= now),
            BreakerState::Probing => self.probe_lost_at.is_some_and(|at| at <= now),
            BreakerState::Closed => false,
        };
        let left = self.cools_at.map(|at| at.saturating_duration_since(now));
        passage(self.state, cooled, self.by_operator, left)
    }
}

/// This process's breakers, for the providers that have one.
pub struct Breakers {
    settings: HashMap<String, BreakerSettings>,
    views: RwLock<HashMap<String, View>>,
    windows: Mutex<HashMap<String, OutcomeWindow>>,
    epoch: Instant,
}

impl Breakers {
    /// The breakers of the providers whose settings have one, all closed
    /// until the first refresh.
    pub fn new<'a>(providers: impl IntoIterator<Item = (&'a String, &'a ProviderSettings)>) -> Self {
        let settings = providers.into_iter().filter_map(|(name, p)| Some((name.clone(), p.breaker?))).collect();
        Breakers { settings, views: RwLock::default(), windows: Mutex::default(), epoch: Instant::now() }
    }

    /// Whether any provider has a breaker.
    pub fn any(&self) -> bool {
        !self.settings.is_empty()
    }

    /// `provider`'s breaker as this process sees it (closed without one).
    pub fn view(&self, provider: &str) -> View {
        self.views.read().expect("breaker views lock").get(provider).cloned().unwrap_or_else(View::closed)
    }

    /// What `provider`'s breaker lets an attempt on it do now.
    pub fn passage(&self, provider: &str) -> Passage {
        let views = self.views.read().expect("breaker views lock");
        views.get(provider).map_or(Passage::Go, |view| view.passage(Instant::now()))
    }

    /// Where `provider`'s breaker stands, as this process sees it.
    fn state(&self, provider: &str) -> BreakerState {
        let views = self.views.read().expect("breaker views lock");
        views.get(provider).map_or(BreakerState::Closed, |view| view.state)
    }

    /// Whether new work may be routed to `provider`: its breaker is
    /// closed, or its cool-down is over (the next attempt may probe it).
    pub fn routable(&self, provider: &str) -> bool {
        !matches!(self.passage(provider), Passage::Refused(_))
    }

    /// Takes what the database holds, for every provider. A breaker that
    /// changed since the last view starts counting afresh: the calls before
    /// its change say nothing of the provider after it.
    pub fn refreshed(&self, stored: &[StoredBreaker]) {
        let now = Instant::now();
        let views: HashMap<String, View> = stored.iter().map(|b| (b.provider.clone(), View::of(b, now))).collect();
        let mut current = self.views.write().expect("breaker views lock");
        let mut windows = self.windows.lock().expect("breaker windows lock");
        windows.retain(|provider, _| {
            current.get(provider).map(|view| view.since) == views.get(provider).map(|view| view.since)
        });
        *current = views;
    }

    /// Counts a call's outcome; whether `provider`'s window now trips it.
    fn count(&self, provider: &str, failed: bool) -> bool {
        let Some(settings) = self.settings.get(provider) else { return false };
        let second = self.epoch.elapsed().as_secs();
        let mut windows = self.windows.lock().expect("breaker windows lock");
        if !windows.contains_key(provider) {
            windows.insert(provider.to_owned(), OutcomeWindow::default());
        }
        let window = windows.get_mut(provider).expect("inserted above");
        window.record(second, failed, settings.thresholds())
    }

    /// How many of the providers' breakers are in each state, for the metrics.
    pub fn states(&self) -> Vec<(String, BreakerState)> {
        self.settings.keys().map(|name| (name.clone(), self.state(name))).collect()
    }
}

/// Reads every breaker into `breakers`.
pub(crate) async fn refresh(store: &Store, breakers: &Breakers) -> store::Result<()> {
    breakers.refreshed(&store.list_breakers().await?);
    Ok(())
}

/// Refreshes `breakers` every [`REFRESH`], for as long as it runs.
pub(crate) async fn refresh_every_second(store: Store, breakers: std::sync::Arc<Breakers>) {
    loop {
        if let Err(error) = refresh(&store, &breakers).await {
            tracing::warn!(%error, "reading the providers' breakers failed; keeping the last view");
        }
        tokio::time::sleep(REFRESH).await;
    }
}

/// Applies `change` to `provider`'s breaker and, when it applied, takes
/// the database's word for this process's view at once.
async fn apply(store: &Store, breakers: &Breakers, provider: &str, change: BreakerChange<'_>) -> store::Result<bool> {
    let applied = store.change_breaker(provider, change).await?;
    if applied {
        breakers.refreshed(&store.list_breakers().await?);
    }
    Ok(applied)
}

/// Asks to make an attempt on `provider` its breaker's probe, for at most
/// `probe_for`: whether it is (no other process took it first).
pub(crate) async fn take_probe(store: &Store, breakers: &Breakers, provider: &str, probe_for: Duration) -> bool {
    match apply(store, breakers, provider, BreakerChange::Probe { probe_for }).await {
        Ok(taken) => taken,
        Err(error) => {
            tracing::warn!(%error, provider, "taking the breaker's probe failed: the attempt is not sent");
            false
        }
    }
}

/// Counts the outcome of a call to `provider` (`failed`: a definitive
/// failure or a timeout); a probe's outcome closes or reopens the breaker,
/// and a window that trips opens it.
pub(crate) async fn record(store: &Store, breakers: &Breakers, provider: &str, failed: bool, probe: bool) {
    let Some(settings) = breakers.settings.get(provider).copied() else { return };
    let cool_down = settings.cool_down;
    let change = if probe {
        if failed { BreakerChange::Reopen { cool_down, reason: "its probe failed" } } else { BreakerChange::Close }
    } else {
        if breakers.state(provider) != BreakerState::Closed || !breakers.count(provider, failed) {
            return;
        }
        BreakerChange::Trip { cool_down, reason: "most of its recent calls failed" }
    };
    match apply(store, breakers, provider, change).await {
        Ok(true) => {
            let state = breakers.state(provider);
            tracing::warn!(provider, state = state.as_str(), "the provider's breaker changed");
        }
        Ok(false) => {}
        Err(error) => tracing::warn!(%error, provider, "changing the provider's breaker failed"),
    }
}

/// An operator opens (`open`) or closes `provider`'s breaker, with why.
pub(crate) async fn set_by_operator(
    store: &Store,
    breakers: &Breakers,
    provider: &str,
    open: bool,
    reason: &str,
) -> store::Result<View> {
    let change = if open { BreakerChange::OperatorOpen { reason } } else { BreakerChange::OperatorClose { reason } };
    apply(store, breakers, provider, change).await?;
    Ok(breakers.view(provider))
}
