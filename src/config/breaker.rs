//! `[providers.NAME.breaker]`: a provider's breaker, when it takes the
//! provider out of service and for how long before a probe, and the
//! ranges those settings must be in.

use std::time::Duration;

use serde::Deserialize;

use super::duration;

/// `[providers.NAME.breaker]`: when the provider is taken out of service,
/// and for how long before a probe.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerSettings {
    /// The share of failed calls (definitive failures and timeouts) that
    /// opens it.
    #[serde(default = "default_failure_rate")]
    pub failure_rate: f64,
    /// The fewest calls in the window it decides on.
    #[serde(default = "default_min_calls")]
    pub min_calls: u32,
    /// How far back calls count, in each process.
    #[serde(default = "default_window", rename = "window_ms", with = "duration::millis")]
    pub window: Duration,
    /// How long it stays open before a probe.
    #[serde(default = "default_cool_down", rename = "cool_down_ms", with = "duration::millis")]
    pub cool_down: Duration,
}

impl BreakerSettings {
    /// When it opens.
    pub fn thresholds(&self) -> crate::domain::breaker::Thresholds {
        crate::domain::breaker::Thresholds {
            failure_rate: self.failure_rate,
            min_calls: self.min_calls,
            window: self.window,
        }
    }

    /// Why the breaker of provider `name` cannot be used, if it cannot.
    pub(super) fn check(&self, name: &str) -> Result<(), String> {
        if !(self.failure_rate > 0.0 && self.failure_rate <= 1.0) {
            return Err(format!("providers.{name}.breaker.failure_rate must be above 0 and at most 1"));
        }
        if self.min_calls == 0 || self.window < Duration::from_millis(1_000) || self.cool_down.is_zero() {
            return Err(format!(
                "providers.{name}.breaker: min_calls and cool_down_ms must be at least 1, window_ms at least 1000"
            ));
        }
        Ok(())
    }
}

fn default_failure_rate() -> f64 {
    0.5
}

fn default_min_calls() -> u32 {
    10
}

fn default_window() -> Duration {
    Duration::from_millis(30_000)
}

fn default_cool_down() -> Duration {
    Duration::from_millis(30_000)
}
