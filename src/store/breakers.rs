//! The providers' breakers as the database holds them, shared by every
//! process: read whole (each process refreshes its view every second) and
//! changed by guarded statements that say whether they applied, so that two
//! processes never both take a probe or both reopen a breaker.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Result, Store};
use crate::domain::breaker::BreakerState;

/// One provider's breaker as stored (a provider without a row is closed).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredBreaker {
    /// The provider.
    pub provider: String,
    /// Where it stands.
    pub state: BreakerState,
    /// When it last changed.
    pub since: DateTime<Utc>,
    /// For an open one: how long its cool-down has left by the database's
    /// clock (zero or less: over); `None` when an operator opened it.
    pub cool_down_left: Option<f64>,
    /// For a probing one: how long its probe has left (zero or less: lost).
    pub probe_left: Option<f64>,
    /// Whether an operator made this change.
    pub by_operator: bool,
    /// Why, for people.
    pub reason: String,
}

/// A change of one provider's breaker, each applied only from the states
/// it names.
#[derive(Clone, Copy, Debug)]
pub enum BreakerChange<'a> {
    /// A process's window of calls tripped it: open for `cool_down`, from
    /// closed.
    Trip {
        /// How long it stays open before a probe.
        cool_down: Duration,
        /// Why.
        reason: &'a str,
    },
    /// The probe failed: open for another `cool_down`, from probing.
    Reopen {
        /// How long.
        cool_down: Duration,
        /// Why.
        reason: &'a str,
    },
    /// An attempt takes the probe, for at most `probe_for`: from open with
    /// its cool-down over, or from probing with its probe lost; never from
    /// an operator's opening.
    Probe {
        /// How long the probe may take before another may be tried.
        probe_for: Duration,
    },
    /// The probe answered: closed, from probing.
    Close,
    /// An operator opened it (until an operator closes it), from any state.
    OperatorOpen {
        /// Why.
        reason: &'a str,
    },
    /// An operator closed it, from any state.
    OperatorClose {
        /// Why.
        reason: &'a str,
    },
}

impl Store {
    /// Every provider's stored breaker.
    pub async fn list_breakers(&self) -> Result<Vec<StoredBreaker>> {
        self.driver().list_breakers().await
    }

    /// Changes `provider`'s breaker; whether the change applied (the
    /// breaker was in a state it may start from).
    pub async fn change_breaker(&self, provider: &str, change: BreakerChange<'_>) -> Result<bool> {
        self.driver().change_breaker(provider, change).await
    }
}
