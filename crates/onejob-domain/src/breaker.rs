//! A provider's breaker, as pure decisions. While *closed*, attempts go to
//! the provider and their outcomes are counted over a sliding window
//! ([`OutcomeWindow`]); when enough of them failed ([`Thresholds`]), it
//! *opens*: new first attempts go to the next qualified provider of their
//! task's chain, hedges and failovers pass it over, and an attempt that
//! must run on it fails fast. After its cool-down, one attempt is let
//! through as the *probe* (the breaker is then *probing*): its success
//! closes the breaker, its failure opens it for another cool-down. An
//! operator may open it (until closed by hand) or close it.

use std::collections::VecDeque;
use std::time::Duration;

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Attempts go to the provider.
    Closed,
    /// Attempts do not, until the cool-down ends (or an operator closes it).
    Open,
    /// One attempt, the probe, is deciding whether it closes.
    Probing,
}

impl BreakerState {
    /// Its name in the database, the API and the metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::Probing => "probing",
        }
    }

    /// Every state.
    pub const ALL: [BreakerState; 3] = [BreakerState::Closed, BreakerState::Open, BreakerState::Probing];
}

impl std::str::FromStr for BreakerState {
    type Err = super::state::UnknownState;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        BreakerState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| super::state::UnknownState(text.into()))
    }
}

/// When a closed breaker opens: at least `min_calls` outcomes in the last
/// `window`, of which at least `failure_rate` failed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// The share of failed calls that opens it.
    pub failure_rate: f64,
    /// The fewest calls it decides on.
    pub min_calls: u32,
    /// How far back calls count.
    pub window: Duration,
}

/// The outcomes of one provider's calls over a sliding window, in slots of
/// one second: (second, calls, failures), oldest first.
#[derive(Clone, Debug, Default)]
pub struct OutcomeWindow {
    slots: VecDeque<(u64, u32, u32)>,
}

impl OutcomeWindow {
    /// Counts a call that ended at `second` (failed or not); whether the
    /// window now says the breaker should open.
    pub fn record(&mut self, second: u64, failed: bool, thresholds: Thresholds) -> bool {
        let span = thresholds.window.as_secs().max(1);
        while self.slots.front().is_some_and(|&(at, _, _)| at + span <= second) {
            self.slots.pop_front();
        }
        if self.slots.back().is_none_or(|&(at, _, _)| at < second) {
            self.slots.push_back((second, 0, 0));
        }
        let slot = self.slots.back_mut().expect("a slot was just pushed");
        slot.1 += 1;
        slot.2 += u32::from(failed);
        let (calls, failures) =
            self.slots.iter().fold((0u64, 0u64), |(c, f), &(_, cs, fs)| (c + u64::from(cs), f + u64::from(fs)));
        calls >= u64::from(thresholds.min_calls.max(1))
            && failures as f64 >= thresholds.failure_rate * calls as f64 - 1e-9
    }

    /// Forgets every outcome (when the breaker changes).
    pub fn clear(&mut self) {
        self.slots.clear();
    }
}

/// What a breaker lets an attempt on its provider do, as this process
/// sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passage {
    /// Go: the breaker is closed.
    Go,
    /// The cool-down is over: the attempt may become the probe, if it is
    /// the first to claim that.
    Probe,
    /// Fail fast: open (for this long at most, if it reopens by itself), or
    /// a probe is deciding.
    Refused(Option<Duration>),
}

/// What a breaker lets through, from where it stands: `cooled` says
/// whether its cool-down is over (for an open one) or its probe's time is
/// up (for a probing one; the probe was lost); `by_operator` whether an
/// operator opened it (then only an operator closes it); `left` how long
/// the cool-down has to run.
pub fn passage(state: BreakerState, cooled: bool, by_operator: bool, left: Option<Duration>) -> Passage {
    match state {
        BreakerState::Closed => Passage::Go,
        _ if by_operator => Passage::Refused(None),
        _ if cooled => Passage::Probe,
        BreakerState::Open => Passage::Refused(left),
        BreakerState::Probing => Passage::Refused(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THRESHOLDS: Thresholds = Thresholds { failure_rate: 0.5, min_calls: 4, window: Duration::from_secs(10) };

    #[test]
    fn a_breaker_opens_on_enough_calls_mostly_failed_within_the_window() {
        let mut window = OutcomeWindow::default();
        assert!(!window.record(0, true, THRESHOLDS), "one call decides nothing");
        assert!(!window.record(1, true, THRESHOLDS));
        assert!(!window.record(2, false, THRESHOLDS), "3 calls, under min_calls");
        assert!(window.record(3, false, THRESHOLDS), "2 of 4 failed: half");
        let mut window = OutcomeWindow::default();
        for second in 0..3 {
            window.record(second, true, THRESHOLDS);
        }
        // Ten seconds on, those three are forgotten.
        assert!(!window.record(12, true, THRESHOLDS), "{window:?}");
        assert!(!window.record(12, false, THRESHOLDS));
        assert!(!window.record(12, false, THRESHOLDS));
        assert!(!window.record(12, false, THRESHOLDS), "1 of 4 failed");
        assert!(!window.record(13, true, THRESHOLDS), "2 of 5");
        assert!(window.record(13, true, THRESHOLDS), "3 of 6");
        window.clear();
        assert!(!window.record(13, true, THRESHOLDS));
    }

    #[test]
    fn an_open_breaker_refuses_until_its_cool_down_ends_then_lets_one_probe_try() {
        let left = Some(Duration::from_secs(3));
        assert_eq!(passage(BreakerState::Closed, false, false, None), Passage::Go);
        assert_eq!(passage(BreakerState::Open, false, false, left), Passage::Refused(left));
        assert_eq!(passage(BreakerState::Open, true, false, None), Passage::Probe);
        assert_eq!(passage(BreakerState::Probing, false, false, None), Passage::Refused(None));
        assert_eq!(passage(BreakerState::Probing, true, false, None), Passage::Probe, "a probe lost is replaced");
        assert_eq!(passage(BreakerState::Open, true, true, None), Passage::Refused(None), "an operator's stays open");
    }

    #[test]
    fn states_are_stored_by_name() {
        for state in BreakerState::ALL {
            assert_eq!(state.as_str().parse::<BreakerState>().unwrap(), state);
        }
        assert!("Open".parse::<BreakerState>().is_err());
    }
}
