//! The places a process built with the `failpoints` feature (the tests'
//! build) can be parked, for tests of stalls and crashes: `FAILPOINTS=NAME=return(MILLISECONDS)`.
//!
//! - `worker-before-send`: a worker between its claim and its request;
//! - `worker-before-record`: a worker between the answer and its record;
//! - `webhook-before-send`: the deliverer between a claim and its post;
//! - `settle-before-commit` (`return`): a settlement fails just before its
//!   commit, and rolls back;
//! - `policy-before-next-attempt` (`return(JOB_ID)`): a failure of that
//!   job fails between its own record and the insert of the retry policy's
//!   next attempt, and rolls back (aimed at one job, so that a test can set
//!   it while others run);
//! - `job-with-events-between-reads` (a callback, `fail::cfg_callback`): a
//!   page's read of a job between its log and the job itself.
//!
//! Without the feature, none exists and each costs nothing. Every layer
//! reaches its failpoints through this module's functions, never through
//! `fail` itself.

use std::time::Duration;

/// How long to park at `failpoint`, when it is set.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub(crate) fn parked_at(failpoint: &str) -> Option<Duration> {
    fail::fail_point!(failpoint, |ms| ms.and_then(|ms| ms.parse().ok()).map(Duration::from_millis));
    None
}

/// Runs the callback set at `failpoint`, if one is.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub(crate) fn reached(failpoint: &str) {
    fail::fail_point!(failpoint);
}

/// Whether `failpoint` is set (`return`): the caller then fails.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub(crate) fn fails(failpoint: &str) -> bool {
    fail::fail_point!(failpoint, |_| true);
    false
}

/// Whether `failpoint` is set to fail `subject` (`return(SUBJECT)`).
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub(crate) fn fails_for(failpoint: &str, subject: &str) -> bool {
    fail::fail_point!(failpoint, |aimed: Option<String>| aimed.as_deref() == Some(subject));
    false
}
