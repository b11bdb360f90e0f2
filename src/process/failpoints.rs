//! The places a process built with the `failpoints` feature (the tests'
//! build) can be parked, for tests of stalls and crashes: `FAILPOINTS=NAME=return(MILLISECONDS)`.
//!
//! - `worker-before-send`: a worker between its claim and its request;
//! - `worker-before-record`: a worker between the answer and its record;
//! - `webhook-before-send`: the deliverer between a claim and its post;
//! - `settle-before-commit` (`return`): a settlement fails just before its
//!   commit, and rolls back.
//!
//! Without the feature, none exists and each costs nothing.

use std::time::Duration;

/// How long to park at `failpoint`, when it is set.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn parked_at(failpoint: &str) -> Option<Duration> {
    fail::fail_point!(failpoint, |ms| ms.and_then(|ms| ms.parse().ok()).map(Duration::from_millis));
    None
}
