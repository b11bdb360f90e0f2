//! The retry and failover policy, as a pure decision: given a job's
//! attempts, which provider (if any) the next automatic attempt goes to, and
//! after how long. It acts only on definitive failures: while any attempt is
//! pending, running or unknown it proposes nothing (I4), and one
//! `max_attempts` budget covers the whole chain.

use std::time::Duration;

use super::AttemptState;

/// What the policy needs to know of one earlier attempt.
#[derive(Clone, Copy, Debug)]
pub struct PastAttempt<'a> {
    /// Its provider.
    pub provider: &'a str,
    /// Its state.
    pub state: AttemptState,
    /// For a failed attempt: whether the failure may pass on a retry (429,
    /// 500, 502, 503, a connection refused before the request left).
    pub retryable: bool,
    /// For a failed attempt: how long its provider asked to be left alone
    /// (`Retry-After`), if it said.
    pub retry_after: Option<Duration>,
}

/// A task's policy for one job.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy<'a> {
    /// The job's own provider: first in the chain.
    pub primary: &'a str,
    /// The task's failover list, in order.
    pub failover: &'a [String],
    /// Retries on one provider after retryable failures.
    pub retries_per_provider: u32,
    /// Attempts per job, all of them counted.
    pub max_attempts: u32,
    /// Backoff before the first retry on a provider; doubled each time.
    pub backoff: Duration,
}

/// The next automatic attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextAttempt {
    /// Where it goes.
    pub provider: String,
    /// How long it waits before it may be claimed.
    pub delay: Duration,
}

impl RetryPolicy<'_> {
    /// The next attempt after the job's latest attempt failed, if any.
    /// `attempts` are in attempt-number order.
    pub fn next_attempt(&self, attempts: &[PastAttempt<'_>]) -> Option<NextAttempt> {
        self.candidates(attempts).into_iter().next()
    }

    /// Every provider the next attempt could go to, best first: the same
    /// provider again after a retryable failure (within its retries), then
    /// the untried providers of the chain after it. The caller takes the
    /// first one that is qualified (I5) and records why it skipped others.
    pub fn candidates(&self, attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
        let Some(last) = attempts.last() else { return vec![] };
        let settled = attempts
            .iter()
            .all(|a| matches!(a.state, AttemptState::Failed | AttemptState::Canceled | AttemptState::Superseded));
        if !settled || last.state != AttemptState::Failed || attempts.len() >= self.max_attempts as usize {
            return vec![];
        }
        let mut candidates = vec![];
        let tries_here = attempts.iter().filter(|a| a.provider == last.provider).count() as u32;
        if last.retryable && tries_here <= self.retries_per_provider {
            // The provider's own Retry-After wins over a shorter backoff.
            let backoff = self.backoff.saturating_mul(1 << (tries_here - 1).min(16));
            let delay = last.retry_after.map_or(backoff, |asked| asked.max(backoff));
            candidates.push(NextAttempt { provider: last.provider.to_owned(), delay });
        }
        let mut chain: Vec<&str> = vec![self.primary];
        for provider in self.failover {
            if !chain.contains(&provider.as_str()) {
                chain.push(provider);
            }
        }
        let start = chain.iter().position(|p| *p == last.provider).map_or(0, |i| i + 1);
        candidates.extend(
            chain[start..]
                .iter()
                .filter(|p| !attempts.iter().any(|a| a.provider == **p))
                .map(|p| NextAttempt { provider: (*p).to_owned(), delay: Duration::ZERO }),
        );
        candidates
    }
}

#[cfg(test)]
mod tests {
    use super::AttemptState::*;
    use super::*;

    fn failed(provider: &str, retryable: bool) -> PastAttempt<'_> {
        PastAttempt { provider, state: Failed, retryable, retry_after: None }
    }

    fn policy(failover: &[String]) -> RetryPolicy<'_> {
        RetryPolicy {
            primary: "a",
            failover,
            retries_per_provider: 1,
            max_attempts: 5,
            backoff: Duration::from_millis(100),
        }
    }

    #[test]
    fn retryable_failures_retry_the_same_provider_then_fail_over_in_order() {
        let failover = ["b".to_owned(), "c".to_owned()];
        let policy = policy(&failover);
        let next = |attempts: &[PastAttempt]| policy.next_attempt(attempts);
        assert_eq!(
            next(&[failed("a", true)]),
            Some(NextAttempt { provider: "a".into(), delay: Duration::from_millis(100) })
        );
        assert_eq!(next(&[failed("a", true), failed("a", true)]).unwrap().provider, "b");
        assert_eq!(next(&[failed("a", true), failed("a", true), failed("b", false)]).unwrap().provider, "c");
        assert_eq!(next(&[failed("a", true), failed("a", true), failed("b", false), failed("c", false)]), None);
    }

    #[test]
    fn definitive_failures_fail_over_at_once() {
        let failover = ["b".to_owned()];
        let next = policy(&failover).next_attempt(&[failed("a", false)]);
        assert_eq!(next, Some(NextAttempt { provider: "b".into(), delay: Duration::ZERO }));
    }

    #[test]
    fn nothing_automatic_while_an_attempt_is_unknown_running_or_pending() {
        let failover = ["b".to_owned()];
        let policy = policy(&failover);
        for state in [Unknown, Running, Pending] {
            let attempts =
                [PastAttempt { provider: "b", state, retryable: false, retry_after: None }, failed("a", true)];
            assert_eq!(policy.next_attempt(&attempts), None, "{state}");
        }
        assert_eq!(
            policy.next_attempt(&[PastAttempt {
                provider: "a",
                state: Succeeded,
                retryable: false,
                retry_after: None
            }]),
            None
        );
    }

    #[test]
    fn one_budget_covers_the_whole_chain() {
        let failover = ["b".to_owned()];
        let mut policy = policy(&failover);
        policy.max_attempts = 2;
        assert_eq!(policy.next_attempt(&[failed("a", true), failed("a", true)]), None);
    }

    #[test]
    fn candidates_list_every_way_forward_in_order() {
        let failover = ["b".to_owned(), "c".to_owned()];
        let providers: Vec<String> =
            policy(&failover).candidates(&[failed("a", true)]).into_iter().map(|n| n.provider).collect();
        assert_eq!(providers, ["a", "b", "c"]);
    }

    #[test]
    fn a_providers_retry_after_delays_the_retry_on_it_but_not_a_failover() {
        let failover = ["b".to_owned()];
        let policy = policy(&failover);
        let asked = |seconds| PastAttempt { retry_after: Some(Duration::from_secs(seconds)), ..failed("a", true) };
        let candidates = policy.candidates(&[asked(3)]);
        assert_eq!(candidates[0], NextAttempt { provider: "a".into(), delay: Duration::from_secs(3) });
        assert_eq!(candidates[1], NextAttempt { provider: "b".into(), delay: Duration::ZERO });
        // A Retry-After shorter than the backoff does not shorten it.
        assert_eq!(policy.next_attempt(&[asked(0)]).unwrap().delay, Duration::from_millis(100));
    }

    #[test]
    fn backoff_doubles_per_retry_on_one_provider() {
        let mut policy = policy(&[]);
        policy.retries_per_provider = 3;
        let attempts = [failed("a", true), failed("a", true), failed("a", true)];
        assert_eq!(policy.next_attempt(&attempts).unwrap().delay, Duration::from_millis(400));
    }
}
