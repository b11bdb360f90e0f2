//! Hedged attempts, as pure decisions: when a job's running attempt has
//! gone without an answer long enough, a second attempt is raced against
//! it, and the job's compare-and-swap takes whichever answers first.
//!
//! Three rules decide, each here: how long to wait ([`HedgeDelay`], fixed
//! or a percentile of the provider's recent latency, [`LatencyWindow`]);
//! whether the task's budget of hedges allows one more ([`HedgeShare`]: at
//! most `max_share` of its jobs over a sliding minute); and whether the job
//! may take it ([`check_hedge`]: the hedged attempt still running without
//! a streamed piece, fewer than `max_hedges` hedges so far, and every rule
//! a client's attempt meets, I4 and I5 included).

use std::collections::VecDeque;
use std::time::Duration;

use super::admission::{AdmissionFacts, Refused, check_admission};
use super::{AttemptOrigin, AttemptState, TaskRules};

/// How long a running attempt goes without an answer before it is hedged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HedgeDelay {
    /// This long.
    Fixed(Duration),
    /// The provider's recent latency at this percentile (0 < p < 100).
    Percentile(f64),
}

impl HedgeDelay {
    /// The wait for an attempt on a provider whose recent answers took
    /// `recent`; `None` while a percentile has too few answers to go on.
    pub fn wait(self, recent: &LatencyWindow) -> Option<Duration> {
        match self {
            HedgeDelay::Fixed(wait) => Some(wait),
            HedgeDelay::Percentile(p) => recent.percentile(p),
        }
    }
}

/// Why a hedge was not started, as the metrics count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HedgeSkip {
    /// The hedged attempt is no longer running (it answered, failed or
    /// became unknown), or its streamed answer holds the job's output.
    Answered,
    /// The job has had its `max_hedges`.
    MaxHedges,
    /// The task's `max_share` of hedged jobs over the last minute is spent.
    Share,
    /// No hedge provider is qualified and within the job's budget.
    NoProvider,
    /// An admission rule refused it (a pending or unknown attempt, the
    /// attempt limits, the job's end).
    Refused,
}

impl HedgeSkip {
    /// Every reason.
    pub const ALL: [HedgeSkip; 5] =
        [HedgeSkip::Answered, HedgeSkip::MaxHedges, HedgeSkip::Share, HedgeSkip::NoProvider, HedgeSkip::Refused];

    /// Its name in the metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            HedgeSkip::Answered => "answered",
            HedgeSkip::MaxHedges => "max-hedges",
            HedgeSkip::Share => "share",
            HedgeSkip::NoProvider => "no-provider",
            HedgeSkip::Refused => "refused",
        }
    }
}

/// Whether attempt number `hedged` of a job may be hedged on
/// `facts.provider`: it is still running and no streamed piece of it holds
/// the output, the job has had fewer than `max_hedges` hedges, and the new
/// attempt meets every admission rule ([`check_admission`]: no attempt
/// pending or unknown, within `max_in_flight` and `max_attempts`, the
/// provider qualified and within the budget).
pub fn check_hedge(
    facts: &AdmissionFacts<'_>,
    hedged: i32,
    max_hedges: u32,
    rules: &dyn TaskRules,
) -> Result<(), (HedgeSkip, Option<Refused>)> {
    let running = facts.attempts.iter().any(|a| a.number == hedged && a.state == AttemptState::Running);
    if !running || facts.output_held {
        return Err((HedgeSkip::Answered, None));
    }
    let hedges = facts.attempts.iter().filter(|a| a.origin == AttemptOrigin::Hedge).count();
    if hedges >= max_hedges as usize {
        return Err((HedgeSkip::MaxHedges, None));
    }
    check_admission(facts, rules).map_err(|refused| {
        let skip = match refused.refusal {
            super::AdmissionRefusal::ProviderNotQualified | super::AdmissionRefusal::BudgetExceeded => {
                HedgeSkip::NoProvider
            }
            _ => HedgeSkip::Refused,
        };
        (skip, Some(refused))
    })
}

/// The fewest answers a percentile is taken from.
pub const MIN_SAMPLES: usize = 20;

/// The latest answers' latencies of one provider (at most
/// [`LatencyWindow::CAPACITY`]), for a percentile.
#[derive(Clone, Debug, Default)]
pub struct LatencyWindow {
    latest: VecDeque<Duration>,
}

impl LatencyWindow {
    /// How many latencies it keeps.
    pub const CAPACITY: usize = 512;

    /// Adds one answer's latency, forgetting the oldest when full.
    pub fn record(&mut self, latency: Duration) {
        if self.latest.len() == Self::CAPACITY {
            self.latest.pop_front();
        }
        self.latest.push_back(latency);
    }

    /// The latency `p` percent of the kept answers took at most (nearest
    /// rank); `None` with fewer than [`MIN_SAMPLES`].
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        if self.latest.len() < MIN_SAMPLES {
            return None;
        }
        let mut sorted: Vec<Duration> = self.latest.iter().copied().collect();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        Some(sorted[rank.clamp(1, sorted.len()) - 1])
    }
}

/// One task's jobs and hedges over a sliding minute, in one-second slots:
/// a hedge is allowed while the hedges of the last minute, with it, are at
/// most `max_share` of its jobs.
#[derive(Clone, Debug, Default)]
pub struct HedgeShare {
    /// (second, jobs, hedges), oldest first, within the last minute.
    slots: VecDeque<(u64, u32, u32)>,
}

impl HedgeShare {
    /// The window's length in seconds.
    pub const SECONDS: u64 = 60;

    fn slot(&mut self, second: u64) -> &mut (u64, u32, u32) {
        while self.slots.front().is_some_and(|&(at, _, _)| at + Self::SECONDS <= second) {
            self.slots.pop_front();
        }
        if self.slots.back().is_none_or(|&(at, _, _)| at < second) {
            self.slots.push_back((second, 0, 0));
        }
        self.slots.back_mut().expect("a slot was just pushed")
    }

    /// Counts a job's first try, sent at `second`.
    pub fn job(&mut self, second: u64) {
        self.slot(second).1 += 1;
    }

    /// Whether one more hedge at `second` keeps the minute's hedges within
    /// `max_share` of its jobs; if so, it is counted.
    pub fn try_hedge(&mut self, second: u64, max_share: f64) -> bool {
        self.slot(second);
        let (jobs, hedges) =
            self.slots.iter().fold((0u64, 0u64), |(j, h), &(_, js, hs)| (j + u64::from(js), h + u64::from(hs)));
        // A hair of slack, so that 0.1 of 20 jobs allows 2 whatever the rounding.
        if (hedges + 1) as f64 > max_share * jobs as f64 + 1e-9 {
            return false;
        }
        self.slots.back_mut().expect("the slot of this second").2 += 1;
        true
    }

    /// Gives back a hedge counted at `second` that was not started.
    pub fn untake(&mut self, second: u64) {
        if let Some(slot) = self.slots.iter_mut().rev().find(|(at, _, _)| *at == second) {
            slot.2 = slot.2.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{NextAttempt, PastAttempt};
    use crate::{Attempt, AttemptLimits, JobState};

    struct Rules;

    impl TaskRules for Rules {
        fn limits(&self, _task: &str) -> AttemptLimits {
            AttemptLimits { max_attempts: 5, max_in_flight: 3 }
        }
        fn contract_hash(&self, _task: &str, _provider: &str) -> Option<[u8; 32]> {
            Some([1; 32])
        }
        fn retry_candidates(&self, _: &str, _: &str, _: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
            Vec::new()
        }
    }

    fn attempt(number: i32, state: AttemptState, origin: AttemptOrigin) -> Attempt {
        Attempt { number, provider: "own".into(), origin, ..crate::job::tests::attempt(state) }
    }

    fn skip(attempts: &[Attempt], output_held: bool, max_hedges: u32) -> Option<HedgeSkip> {
        let facts = AdmissionFacts {
            task: "t",
            primary: "own",
            provider: "own",
            job: JobState::Running,
            attempts,
            qualification: None,
            budget: None,
            output_held,
        };
        check_hedge(&facts, 1, max_hedges, &Rules).err().map(|(skip, _)| skip)
    }

    #[test]
    fn only_a_running_attempt_without_a_streamed_piece_is_hedged() {
        use AttemptOrigin::*;
        use AttemptState::*;
        assert_eq!(skip(&[attempt(1, Running, Client)], false, 1), None);
        assert_eq!(skip(&[attempt(1, Running, Client)], true, 1), Some(HedgeSkip::Answered));
        for state in [Pending, Unknown, Succeeded, Failed, Canceled] {
            assert_eq!(skip(&[attempt(1, state, Client)], false, 1), Some(HedgeSkip::Answered), "{state}");
        }
    }

    #[test]
    fn never_while_a_sibling_is_pending_or_unknown_and_never_past_max_hedges() {
        use AttemptOrigin::*;
        use AttemptState::*;
        let with = |state| [attempt(1, Running, Client), attempt(2, state, Policy)];
        assert_eq!(skip(&with(Pending), false, 2), Some(HedgeSkip::Refused));
        assert_eq!(skip(&with(Unknown), false, 2), Some(HedgeSkip::Refused));
        assert_eq!(skip(&with(Failed), false, 2), None);
        let hedged = [attempt(1, Running, Client), attempt(2, Failed, Hedge)];
        assert_eq!(skip(&hedged, false, 1), Some(HedgeSkip::MaxHedges));
        assert_eq!(skip(&hedged, false, 2), None);
        let full = [attempt(1, Running, Client), attempt(2, Running, Client), attempt(3, Running, Client)];
        assert_eq!(skip(&full, false, 1), Some(HedgeSkip::Refused), "max_in_flight");
    }

    #[test]
    fn a_percentile_needs_twenty_answers_and_takes_the_nearest_rank() {
        let mut window = LatencyWindow::default();
        let ms = Duration::from_millis;
        for i in 1..=19 {
            window.record(ms(i));
        }
        assert_eq!(HedgeDelay::Percentile(95.0).wait(&window), None);
        assert_eq!(HedgeDelay::Fixed(ms(7)).wait(&window), Some(ms(7)));
        window.record(ms(20));
        assert_eq!(window.percentile(95.0), Some(ms(19)));
        assert_eq!(window.percentile(50.0), Some(ms(10)));
        for _ in 0..LatencyWindow::CAPACITY {
            window.record(ms(100));
        }
        assert_eq!(window.percentile(1.0), Some(ms(100)), "the oldest were forgotten");
    }

    #[test]
    fn hedges_stay_within_their_share_of_the_last_minutes_jobs() {
        let mut share = HedgeShare::default();
        assert!(!share.try_hedge(0, 0.1), "no jobs, no hedge");
        for _ in 0..20 {
            share.job(0);
        }
        assert!(share.try_hedge(1, 0.1));
        assert!(share.try_hedge(2, 0.1));
        assert!(!share.try_hedge(3, 0.1), "a third is 15 % of 20 jobs");
        share.untake(2);
        assert!(share.try_hedge(3, 0.1), "a hedge given back frees its place");
        // A minute on, the jobs and hedges of seconds 0 and 1 are forgotten:
        // 20 jobs and the hedge of second 3 are left.
        for _ in 0..20 {
            share.job(60);
        }
        assert!(share.try_hedge(61, 0.1), "2 hedges of 20 jobs");
        assert!(!share.try_hedge(61, 0.1), "3 of 20");
        for second in 62..200 {
            share.job(second);
        }
        assert!(share.slots.len() <= HedgeShare::SECONDS as usize, "one slot a second, a minute's worth");
    }
}
